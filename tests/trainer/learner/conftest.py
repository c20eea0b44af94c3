"""The learner tests' shared batch of turns drawn among listed replies (`rollout.action_match: choice`)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import pytest

from trainer.backends.base import SamplingSettings
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.objectives.batch import TokenBatch
from trainer.prompts import encode_user_turn
from trainer.rollout.types import Trajectory, Turn

ACTIONS = [
    "go to drawer 1",
    "go to drawer 2",
    "go to countertop 1",
    "take apple 1 from countertop 1",
    "look",
    "open fridge 1",
]


def sample_trajectories(
    tiny_models: TinyModels,
    count: int,
    turns: int,
    sampling: Callable[[int, int], SamplingSettings],
    listed: Callable[[int, int], list[str] | None] = lambda i, k: None,
) -> list[Trajectory]:
    """`count` trajectories (2 groups, alternating) of `turns` turns by the tiny student, turn k of trajectory i
    sampled with `sampling(i, k)` and drawn among the replies naming `listed(i, k)` (None: free text); trajectory i
    won when i % 3 == 0; not teacher-scored."""
    student = HFBackend.from_pretrained(tiny_models.student)
    tok = load_tokenizer(tiny_models.student)
    trajs = []
    for i in range(count):
        made = []
        for k in range(turns):
            prompt = encode_user_turn(tok, f"Task: put apple {i % 2} in fridge. Step {k + 1}. Actions: look")
            actions = listed(i, k)
            replies = (
                None
                if actions is None
                else [[*tok.encode(a, add_special_tokens=False), tok.eos_token_id] for a in actions]
            )
            gen = student.generate([prompt], sampling(i, k), None if replies is None else [replies])[0]
            made.append(
                Turn(
                    prompt,
                    gen.token_ids,
                    gen.logprobs,
                    "",
                    "look",
                    "ok",
                    listed=replies,
                    listed_logp=gen.listed_logprobs,
                )
            )
        trajs.append(Trajectory(f"t{i % 2}", group=i % 2, seed=0, turns=made, won=i % 3 == 0))
    return trajs


@pytest.fixture(scope="module")
def student_trajectories(tiny_models: TinyModels) -> Callable[..., list[Trajectory]]:
    """`sample_trajectories` with the session's tiny models: `(count, turns, sampling, listed=...)`."""
    return functools.partial(sample_trajectories, tiny_models)


@pytest.fixture(scope="module")
def listed_trajectories(tiny_models: TinyModels) -> list[Trajectory]:
    """6 trajectories (2 groups x 3) of 3 turns by the student: two drawn among listed replies (lists of 3-6), one
    free text; not teacher-scored."""
    return sample_trajectories(
        tiny_models,
        6,
        3,
        lambda i, k: SamplingSettings(max_new_tokens=12, temperature=1.0, seed=10 * i + k, constrain="replies"),
        lambda i, k: ACTIONS[k : k + 3 + i % 4] if k < 2 else None,
    )


@pytest.fixture(scope="module")
def listed_batch(tiny_models: TinyModels, listed_trajectories: list[Trajectory]) -> TokenBatch:
    """`listed_trajectories` scored by the teacher, every listed reply too (reply-level OPD), as one batch."""
    trajs = copy.deepcopy(listed_trajectories)
    attach_teacher_logprobs(trajs, HFBackend.from_pretrained(tiny_models.teacher), listed=True)
    return SyncGroups(pad_id=load_tokenizer(tiny_models.student).pad_token_id).compose(trajs)
