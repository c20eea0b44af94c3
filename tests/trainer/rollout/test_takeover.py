"""Teacher takeover (+R): no-progress detection, rewind to the right state (real ALFWorld and WebShop servers),
no teacher loss tokens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from envhub.client import EnvView, Sessions
from envhub.client.formats import action_format
from envhub.client.sync import EnvhubClient
from trainer.backends.base import Generation
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.batching.buffer import turn_is_valid
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import PromptRenderer
from trainer.rollout import GroupRollout, RolloutSettings, SamplingSettings
from trainer.rollout.takeover import NO_PROGRESS_RULES, ProgressTracker, Recovery, RecoverySettings, made_progress


class _Script:
    """Wraps a real tiny model but forces the action of each call (call k: texts[k], or the last one)."""

    def __init__(self, inner: HFBackend, tokenizer: object, actions: list[str]) -> None:
        self.inner, self.tokenizer, self.actions, self.calls = inner, tokenizer, actions, 0

    def generate(self, prompts: list[list[int]], sampling: SamplingSettings) -> list[Generation]:
        out = self.inner.generate(prompts, sampling)
        text = f"<action>{self.actions[min(self.calls, len(self.actions) - 1)]}</action>"
        self.calls += 1
        for gen in out:
            gen.token_ids = self.tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
            gen.logprobs, gen.finish_reason = [-1.0] * len(gen.token_ids), "stop"
        return out


# ---------------------------------------------------------------- detector (pure)


def test_progress_rules() -> None:
    assert made_progress("go to a", "obs a", ["go to a"], [], [])
    assert not made_progress(None, "obs", [], [], [])
    assert not made_progress("fly", "obs", ["go to a"], [], [])
    assert made_progress("fly", "obs", [], [], [])  # no admissible list shown: only repeats count
    assert not made_progress("go to a", "new", [], ["go to a"], [])
    assert not made_progress("go to b", "obs a", [], ["go to a"], ["obs a"])
    # a template stands for free-text actions: only repeats count
    for template in (["search[<your query>]"], ["<search> query </search>", "<answer> text </answer>"]):
        assert made_progress("search[mug]", "obs", template, [], [])
        assert not made_progress("search[mug]", "obs", template, ["search[mug]"], [])
    assert not made_progress("click[x]", "obs", ["click[< prev]", "click[next >]"], [], [])


def test_each_no_progress_rule_can_be_left_out() -> None:
    """`divopd.recovery.no_progress` (the paper names no rule): each rule decides on its own."""
    cases = {
        "unparsable": (None, "obs", [], [], []),
        "inadmissible": ("fly", "obs", ["go to a"], [], []),
        "repeat_action": ("go to a", "new", [], ["go to a"], []),
        "repeat_observation": ("go to b", "obs a", [], [], ["obs a"]),
    }
    for rule, case in cases.items():
        assert not made_progress(*case)
        assert made_progress(*case, NO_PROGRESS_RULES - {rule}), rule
    with pytest.raises(ValueError, match="unknown no-progress"):
        RecoverySettings(no_progress=frozenset({"slow"}))
    from trainer.config import load_config

    config = load_config("divopd-tiny.yaml", ["divopd.recovery.no_progress=[unparsable]"])
    assert config.divopd.recovery.no_progress == ["unparsable"]


def test_tracker_triggers_after_patience_and_hands_back() -> None:
    tracker = ProgressTracker(RecoverySettings(patience=2, takeover_turns=1))
    tracker.record(0, "a", "oa", [], teacher=False)
    tracker.record(1, "b", "ob", [], teacher=False)
    assert tracker.start_takeover() is None
    tracker.record(2, "a", "oa", [], teacher=False)  # repeat: stall 1, starts at turn 2
    assert tracker.start_takeover() is None
    tracker.record(3, None, "Invalid", [], teacher=False)  # stall 2
    assert tracker.start_takeover() == 2 and tracker.teacher_acting
    tracker.record(4, "c", "oc", [], teacher=True)
    assert not tracker.teacher_acting and tracker.takeovers == 1 and tracker.teacher_turns == 1
    assert tracker.start_takeover() is None  # the stall counter restarted


# ---------------------------------------------------------------- real server


@dataclass(frozen=True)
class _Case:
    """One environment of the takeover test: its server fixture, a task, and two actions to oscillate
    between (each makes progress once, then repeats); the teacher's `look` shows the state unchanged
    (ALFWorld's look; in WebShop an invalid action, answered with the current page)."""

    env: str
    server: str
    task: tuple[str, int]
    oscillate: Callable[[EnvView], tuple[str, str]]


def _two_places(view: EnvView) -> tuple[str, str]:
    goes = [a for a in view.admissible if a.startswith("go to ")]
    return goes[0], goes[1]


def _search_and_back(view: EnvView) -> tuple[str, str]:
    del view
    return "search[face moisturizer]", "click[back to search]"


CASES = {
    "alfworld": _Case("alfworld", "alfworld_server", ("train/00001", 7), _two_places),
    "webshop": _Case("webshop", "webshop_server", ("train/00001", 7), _search_and_back),
}


@pytest.fixture(scope="module", params=list(CASES))
def env(request: pytest.FixtureRequest) -> Iterator[tuple[_Case, Sessions]]:
    case = CASES[request.param]
    client = EnvhubClient(request.getfixturevalue(case.server))
    yield case, Sessions(client, case.env)
    client.close()


def _observation_after(port: Sessions, task: tuple[str, int], actions: list[str]) -> str:
    view = port.start(task[0], seed=task[1], max_steps=20)
    try:
        for action in actions:
            view = port.step(view.session_id, action, timeout=30.0)
        return view.text
    finally:
        port.end(view.session_id)


@pytest.mark.parametrize("rewind", [True, False])
def test_takeover_rewinds_to_the_last_progress_and_keeps_teacher_turns_out_of_the_loss(
    env: tuple[_Case, Sessions], tiny_models: TinyModels, rewind: bool
) -> None:
    case, port = env
    tok = load_tokenizer(tiny_models.student)
    first = port.start(case.task[0], seed=case.task[1], max_steps=20)
    port.end(first.session_id)
    a, b = case.oscillate(first)
    # the student oscillates a, b, a, b, a (turns 2-4 make no progress), then plays b
    stop = action_format(case.env).stop
    student = _Script(HFBackend.from_pretrained(tiny_models.student, stop=stop), tok, [a, b, a, b, a, b])
    teacher_model = HFBackend.from_pretrained(tiny_models.teacher, stop=stop)
    teacher = _Script(teacher_model, tok, ["look"])
    recovery = Recovery(RecoverySettings(patience=3, takeover_turns=2, rewind=rewind), teacher)
    settings = RolloutSettings(group_size=1, max_turns=8, snapshots=True)
    rollout = GroupRollout(port, student, tok, PromptRenderer(case.env, style="compact"), settings, recovery)
    try:
        (trajectory,), stats = rollout.run([case.task], SamplingSettings(max_new_tokens=8))
    finally:
        rollout.close()
    flags = [turn.teacher for turn in trajectory.turns]
    assert flags == [False] * 5 + [True, True] + [False]
    assert stats.takeovers == 1 and stats.teacher_turns == 2 and stats.rewinds == int(rewind)
    # the teacher's "look" shows the state after turn 1 (after b) with rewind, after turn 4 (after a) without
    after_b = _observation_after(port, case.task, [a, b, "look"])
    after_a = _observation_after(port, case.task, [a, b, a, b, a, "look"])
    assert after_b != after_a
    assert trajectory.turns[5].observation == (after_b if rewind else after_a)
    # teacher turns are never scored, never valid rows, never supervised
    attach_teacher_logprobs([trajectory], teacher_model)
    assert [turn.logp_teacher is None for turn in trajectory.turns] == flags
    assert [turn_is_valid(turn) for turn in trajectory.turns] == [not f for f in flags]
    batch = SyncGroups("history").compose([trajectory])
    supervised = [batch.input_ids[i][batch.loss_mask[i]].tolist() for i in range(batch.num_rows)]
    assert supervised == [turn.response_ids for turn in trajectory.turns if not turn.teacher]


def test_recovery_strategy_is_registered_and_its_config_names_the_remedy() -> None:
    from trainer.config import ConfigError, config_from_dict
    from trainer.rollout.strategies import strategy_names

    assert "recovery" in strategy_names()
    with pytest.raises(ConfigError, match="snapshots"):
        config_from_dict({"rollout": {"strategy": "recovery"}})
    config = config_from_dict({"rollout": {"strategy": "recovery", "snapshots": True}})
    assert config.divopd.recovery.patience == 3 and config.divopd.recovery.takeover_turns == 2
