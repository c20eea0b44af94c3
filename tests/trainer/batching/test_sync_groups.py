"""SyncGroups: trajectories -> TokenBatch in history and full context modes."""

from __future__ import annotations

import pytest
import torch

from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.rollout.types import Trajectory, Turn


def _turn(prompt: list[int], response: list[int], **kw: object) -> Turn:
    return Turn(
        prompt_ids=prompt,
        response_ids=response,
        logp_old=[-0.5] * len(response),
        response_text="",
        action="look",
        observation="ok",
        **kw,  # type: ignore[arg-type]
    )


def _history_trajs() -> list[Trajectory]:
    a = Trajectory("t0", group=0, seed=1, turns=[_turn([5, 6, 7], [8, 9]), _turn([5, 6], [10])], won=True)
    b = Trajectory("t0", group=0, seed=1, turns=[_turn([5, 6, 7, 11], [12, 13, 14])])
    dropped = Trajectory("t1", group=1, seed=2, turns=[_turn([1], [2])], dropped="DEADLINE_EXCEEDED")
    return [a, b, dropped]


def test_history_mode_one_row_per_turn() -> None:
    batch = SyncGroups("history", pad_id=0).compose(_history_trajs())
    assert batch.input_ids.shape == (3, 7)
    assert batch.input_ids[0].tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert batch.loss_mask[0].tolist() == [False, False, False, True, True, False, False]
    assert batch.turn_ids[1].tolist() == [-1, -1, 1, -1, -1, -1, -1]
    assert batch.traj_ids.tolist() == [0, 0, 1]
    assert batch.rewards.tolist() == [1.0, 0.0]
    assert batch.group_ids.tolist() == [0, 0]
    assert torch.allclose(batch.logp_old[batch.loss_mask], torch.full((6,), -0.5))
    assert batch.logp_teacher is None


def test_full_mode_one_row_per_trajectory_with_each_turn_at_its_place() -> None:
    first = _turn([1, 2], [3, 4])
    second = _turn([1, 2, 3, 4, 5], [6])
    batch = SyncGroups("full").compose([Trajectory("t", 0, 0, turns=[first, second])])
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert batch.loss_mask.tolist() == [[False, False, True, True, False, True]]
    assert batch.turn_ids.tolist() == [[-1, -1, 0, 0, -1, 1]]


def test_full_mode_rejects_turns_that_do_not_nest() -> None:
    bad = Trajectory("t", 0, 0, turns=[_turn([1, 2], [3]), _turn([9, 9, 9, 9], [6])])
    with pytest.raises(ValueError, match="do not nest"):
        SyncGroups("full").compose([bad])


def test_teacher_turns_and_all_dropped_batches() -> None:
    teacher_only = Trajectory("t", 0, 0, turns=[_turn([1], [2], teacher=True)])
    with pytest.raises(ValueError, match="no complete trajectory"):
        SyncGroups().compose([teacher_only, _history_trajs()[2]])


class _ConstantScorer:
    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        return [[-float(len(p))] * len(r) for p, r in zip(prompts, responses, strict=True)]


def test_teacher_logprobs_are_attached_per_turn() -> None:
    trajs = _history_trajs()
    assert attach_teacher_logprobs(trajs, _ConstantScorer()) == 6
    batch = SyncGroups().compose(trajs)
    assert batch.logp_teacher is not None
    assert batch.logp_teacher[0, 3:5].tolist() == [-3.0, -3.0]
    assert batch.logp_teacher[2, 4:7].tolist() == [-4.0, -4.0, -4.0]
    assert trajs[2].turns[0].logp_teacher is None
