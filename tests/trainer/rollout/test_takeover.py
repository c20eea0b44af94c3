"""Teacher takeover (+R): no-progress detection, rewind to the right state (real server), no teacher loss tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envhub.client.sync import EnvhubClient
from trainer.backends.base import Generation
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.batching.buffer import turn_is_valid
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import PromptRenderer
from trainer.rollout import ClientEnvPort, GroupRollout, RolloutSettings, SamplingSettings
from trainer.rollout.takeover import ProgressTracker, Recovery, RecoverySettings, made_progress
from trainer.workers import STOP_STRINGS

TASK = ("train/00001", 7)


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


@pytest.fixture(scope="module")
def port(alfworld_server: str) -> Iterator[ClientEnvPort]:
    client = EnvhubClient(alfworld_server)
    yield ClientEnvPort(client, "alfworld")
    client.close()


def _places(port: ClientEnvPort) -> tuple[str, str]:
    view = port.create(TASK[0], seed=TASK[1], max_steps=20, admissible=True)
    port.close(view.session_id)
    goes = [a for a in view.admissible if a.startswith("go to ")]
    return goes[0], goes[1]


def _observation_after(port: ClientEnvPort, actions: list[str]) -> str:
    view = port.create(TASK[0], seed=TASK[1], max_steps=20, admissible=True)
    try:
        for action in actions:
            view = port.step(view.session_id, action, admissible=True, timeout=30.0)
        return view.text
    finally:
        port.close(view.session_id)


@pytest.mark.parametrize("rewind", [True, False])
def test_takeover_rewinds_to_the_last_progress_and_keeps_teacher_turns_out_of_the_loss(
    port: ClientEnvPort, tiny_models: TinyModels, rewind: bool
) -> None:
    tok = load_tokenizer(tiny_models.student)
    a, b = _places(port)
    # the student oscillates a, b, a, b, a (turns 2-4 make no progress), then keeps going to b
    student = _Script(HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS), tok, [a, b, a, b, a, b])
    teacher_model = HFBackend.from_pretrained(tiny_models.teacher, stop=STOP_STRINGS)
    teacher = _Script(teacher_model, tok, ["look"])
    recovery = Recovery(RecoverySettings(patience=3, takeover_turns=2, rewind=rewind), teacher)
    settings = RolloutSettings(group_size=1, max_turns=8, snapshots=True)
    rollout = GroupRollout(port, student, tok, PromptRenderer("alfworld", style="compact"), settings, recovery)
    try:
        (trajectory,), stats = rollout.run([TASK], SamplingSettings(max_new_tokens=8))
    finally:
        rollout.close()
    flags = [turn.teacher for turn in trajectory.turns]
    assert flags == [False] * 5 + [True, True] + [False]
    assert stats.takeovers == 1 and stats.teacher_turns == 2 and stats.rewinds == int(rewind)
    # the teacher's "look" shows the state after turn 1 (at b) with rewind, after turn 4 (at a) without
    at_b, at_a = _observation_after(port, [a, b, "look"]), _observation_after(port, [a, b, a, b, a, "look"])
    assert at_b != at_a
    assert trajectory.turns[5].observation == (at_b if rewind else at_a)
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
