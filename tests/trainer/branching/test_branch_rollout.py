"""BranchRollout against real envhub servers on loopback (ALFWorld; WebShop for forks, prefixes and masks):
forks, prefixes, masks, diagnostics, and the statistical proof that continuations from a restored fork are
distributed like uninterrupted play."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from envhub.client import Sessions
from envhub.client.formats import action_format
from envhub.client.sync import EnvhubClient
from trainer.backends.base import Generation
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.branching.diagnostics import STUDENT_TOKENS, TOKEN_SAVING, branch_metrics, generated_tokens
from trainer.branching.rollout import BranchRollout, observation_before
from trainer.branching.select import ForkConfig, ForkPoint
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import PromptRenderer
from trainer.rollout import GroupRollout, RolloutSettings, SamplingSettings, Trajectory
from trainer.rollout.group import Episode, RolloutStats


def _port(address: str, env: str) -> Iterator[Sessions]:
    client = EnvhubClient(address)
    yield Sessions(client, env)
    client.close()


@pytest.fixture(scope="module")
def port(alfworld_server: str) -> Iterator[Sessions]:
    yield from _port(alfworld_server, "alfworld")


@pytest.fixture(scope="module", params=["alfworld", "webshop"])
def any_port(request: pytest.FixtureRequest) -> Iterator[Sessions]:
    """The ALFWorld port, then a WebShop one: the branch mechanics on both natively snapshotting servers."""
    if request.param == "alfworld":
        yield request.getfixturevalue("port")
    else:
        yield from _port(request.getfixturevalue("webshop_server"), "webshop")


def _group(port: Sessions, backend: object, tokenizer: object, max_turns: int = 4) -> GroupRollout:
    renderer = PromptRenderer(port.environment, style="compact", history_length=1)
    settings = RolloutSettings(group_size=1, max_turns=max_turns, snapshots=True, max_prompt_tokens=384)
    return GroupRollout(port, backend, tokenizer, renderer, settings)  # type: ignore[arg-type]


def test_branches_continue_the_main_prefix_from_the_restored_turn(any_port: Sessions, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    student = HFBackend.from_pretrained(tiny_models.student, stop=action_format(any_port.environment).stop)
    teacher = HFBackend.from_pretrained(tiny_models.teacher)
    group = _group(any_port, student, tok)
    sampling = SamplingSettings(max_new_tokens=24, top_logprobs=20, seed=3)
    try:
        mains, main_stats = group.run([("train/00001", 1), ("train/00002", 2)], sampling)
        attach_teacher_logprobs(mains, teacher)
        branching = BranchRollout(group, ForkConfig(num_forks=2, continuations=2, min_turn_gap=0))
        branches, stats = branching.run(mains, dataclasses.replace(sampling, seed=99), random.Random(0))
    finally:
        group.close()
    forks = {(b.group, b.fork) for b in branches}
    assert len(branches) == 2 * len(forks) and len(forks) >= 2
    for branch in branches:
        assert branch.fork is not None
        main = mains[branch.group]
        turn, offset = branch.fork
        fork_turn, main_turn = branch.turns[turn], main.turns[turn]
        assert [t.response_ids for t in branch.turns[:turn]] == [t.response_ids for t in main.turns[:turn]]
        assert all(not t.supervised for t in branch.turns[:turn])
        assert fork_turn.prompt_ids == main_turn.prompt_ids
        assert fork_turn.response_ids[:offset] == main_turn.response_ids[:offset]
        assert fork_turn.logp_old[:offset] == main_turn.logp_old[:offset]
        assert fork_turn.supervise_from == offset and len(fork_turn.response_ids) > offset
        assert branch.initial_observation == main.initial_observation
    # the restored state is the one the main trajectory saw at that turn
    assert observation_before(mains[0], 0) == mains[0].initial_observation
    # generated tokens are counted from the fork on
    assert stats.generated_tokens == sum(generated_tokens(b) for b in branches)
    assert main_stats.generated_tokens == sum(generated_tokens(m) for m in mains)

    scored = attach_teacher_logprobs(branches, teacher)
    assert scored == sum(len(t.response_ids) for b in branches for t in b.turns if t.supervised)
    batch = SyncGroups("history").compose(mains + branches)
    assert int(batch.loss_mask.sum()) == sum(generated_tokens(t) for t in mains + branches)
    full = SyncGroups("history").compose(mains)
    assert int(full.loss_mask.sum()) == sum(len(t.response_ids) for m in mains for t in m.turns)

    metrics = branch_metrics(mains, branches)
    assert metrics[STUDENT_TOKENS] == main_stats.generated_tokens + stats.generated_tokens
    assert 0.0 < metrics[TOKEN_SAVING] < 1.0


# ---------------------------------------------------------------- distribution of restored continuations


class UniformPolicy:
    """A fixed stochastic policy: `<action>a</action>` with `a` uniform over a fixed action list."""

    def __init__(self, tokenizer: object, actions: Sequence[str], seed: int) -> None:
        self.encoded = [tokenizer.encode(f"<action>{a}</action>", add_special_tokens=False) for a in actions]  # type: ignore[attr-defined]
        self.rng = random.Random(seed)
        self.logp = -math.log(len(actions))

    def generate(self, prompts: list[list[int]], sampling: object = None) -> list[Generation]:
        out = []
        for _prompt in prompts:
            ids = list(self.rng.choice(self.encoded))
            out.append(Generation(ids, [self.logp] + [0.0] * (len(ids) - 1), None, "stop"))
        return out


def _suffixes(group: GroupRollout, episodes: list[Episode], start: int) -> list[tuple[str, ...]]:
    group.play(episodes, SamplingSettings(max_new_tokens=8), RolloutStats())
    return [tuple(x for t in e.trajectory.turns[start:] for x in (t.action or "", t.observation)) for e in episodes]


def _restored(branching: BranchRollout, main: Trajectory, turn: int, count: int) -> list[Episode]:
    episodes: list[Episode] = []
    while len(episodes) < count:
        episodes += branching._start(main, ForkPoint(turn, 0, 0.0))
    for e in episodes:
        e.resume = None  # the fixed policy renders its own turn; the state is what is tested
    return episodes


def _uninterrupted(group: GroupRollout, main: Trajectory, turn: int, count: int) -> list[Episode]:
    """Fresh sessions stepped through the main trajectory's first `turn` actions, never restored."""
    episodes = []
    for _ in range(count):
        view = group.port.start(main.task_id, seed=main.seed, max_steps=group.settings.max_turns)
        for t in main.turns[:turn]:
            assert t.action is not None
            view = group.port.step(view.session_id, t.action, timeout=30)
        trajectory = Trajectory(main.task_id, main.group, main.seed, turns=list(main.turns[:turn]))
        episodes.append(Episode(trajectory, view, view.task_description))
    return episodes


def chi2_permutation_p(a: Sequence[object], b: Sequence[object], rounds: int = 2000, seed: int = 0) -> float:
    """Two-sample homogeneity test: permutation p-value of the chi-square statistic over categories."""
    labels = {x: i for i, x in enumerate(sorted(set(a) | set(b), key=repr))}
    codes = np.array([labels[x] for x in [*a, *b]])
    side = np.array([0] * len(a) + [1] * len(b))

    def stat(side: np.ndarray) -> float:
        table = np.stack([np.bincount(codes[side == s], minlength=len(labels)) for s in (0, 1)]).astype(float)
        expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
        return float(((table - expected) ** 2 / np.where(expected > 0, expected, 1)).sum())

    observed = stat(side)
    rng = np.random.default_rng(seed)
    hits = sum(stat(rng.permutation(side)) >= observed - 1e-9 for _ in range(rounds))
    return (hits + 1) / (rounds + 1)


@pytest.mark.slow
def test_restored_fork_continuations_are_distributed_like_uninterrupted_play(
    port: Sessions, tiny_models: TinyModels
) -> None:
    tok = load_tokenizer(tiny_models.student)
    # A main trajectory that moves through the room: the expert's first actions.
    view = port.start("train/00004", seed=5, max_steps=10)
    plan = []
    for _ in range(3):
        plan.append(port.expert(view.session_id)[0])
        port.step(view.session_id, plan[-1], timeout=30)
    port.end(view.session_id)
    main_group = _group(port, _Replay(tok, plan), tok, max_turns=10)
    try:
        (main,), _ = main_group.run([("train/00004", 5)], SamplingSettings(max_new_tokens=8))
    finally:
        main_group.close()
    assert [t.action for t in main.turns[:3]] == plan
    actions = [*plan, "look", "inventory", *list(main.turns[2].admissible)[:5]]
    fork_turn, n, horizon = 2, 120, 3
    group = _group(port, UniformPolicy(tok, actions, seed=1), tok, max_turns=fork_turn + horizon)
    branching = BranchRollout(group, ForkConfig(continuations=4))
    try:
        restored = _suffixes(group, _restored(branching, main, fork_turn, n), fork_turn)
        group.backend = UniformPolicy(tok, actions, seed=2)
        direct = _suffixes(group, _uninterrupted(group, main, fork_turn, n), fork_turn)
        group.backend = UniformPolicy(tok, actions, seed=3)
        wrong = _suffixes(group, _restored(branching, main, 0, n), fork_turn)  # negative control: wrong state
    finally:
        group.close()
    # Same environment: an action sequence seen on both sides produces identical observations.
    by_actions: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for suffix in restored + direct:
        by_actions.setdefault(suffix[0::2], set()).add(suffix[1::2])
    assert all(len(observations) == 1 for observations in by_actions.values())
    # Same distribution: first step (action, observation) and whole 3-step suffixes.
    p_first = chi2_permutation_p([x[:2] for x in restored], [x[:2] for x in direct])
    p_suffix = chi2_permutation_p([x[1::2] for x in restored], [x[1::2] for x in direct])
    p_wrong = chi2_permutation_p([x[1::2] for x in restored], [x[1::2] for x in wrong])
    print(f"restored vs uninterrupted: p(first step) = {p_first:.3f}, p(3-step observations) = {p_suffix:.3f}; "
          f"restored vs wrong state: p = {p_wrong:.4f}")  # fmt: skip
    assert p_first > 0.001 and p_suffix > 0.001
    # The test can fail: continuations from another state are told apart.
    assert p_wrong < 0.001
    assert len(Counter(restored)) > 10  # the policy really varies


class _Replay:
    """Plays a fixed plan (a deterministic main trajectory)."""

    def __init__(self, tokenizer: object, plan: Sequence[str]) -> None:
        self.encoded = [tokenizer.encode(f"<action>{a}</action>", add_special_tokens=False) for a in plan]  # type: ignore[attr-defined]
        self.turn = 0

    def generate(self, prompts: list[list[int]], sampling: object = None) -> list[Generation]:
        ids = list(self.encoded[min(self.turn, len(self.encoded) - 1)])
        self.turn += 1
        return [Generation(ids, [0.0] * len(ids), None, "stop") for _ in prompts]
