"""GroupRollout against a real envhub ALFWorld server on loopback, with the tiny student."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envhub.client.sync import EnvhubClient
from trainer.backends.hf import HFBackend
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import INVALID_ACTION_OBSERVATION, PromptRenderer
from trainer.rollout import ClientEnvPort, GroupRollout, RolloutSettings, SamplingSettings
from trainer.workers import STOP_STRINGS


class _ScriptedBackend:
    """Wraps the real tiny model but forces chosen response texts (to test parsing and invalid turns)."""

    def __init__(self, inner: HFBackend, tokenizer: object, texts: list[str]) -> None:
        self.inner, self.tokenizer, self.texts = inner, tokenizer, texts
        self.batch_sizes: list[int] = []

    def generate(self, prompts: list[list[int]], **kwargs: object):  # type: ignore[no-untyped-def]
        self.batch_sizes.append(len(prompts))
        out = self.inner.generate(prompts, **kwargs)  # type: ignore[arg-type]
        for i, gen in enumerate(out):
            ids = self.tokenizer.encode(self.texts[i % len(self.texts)], add_special_tokens=False)  # type: ignore[attr-defined]
            gen.token_ids, gen.logprobs = ids, [-1.0] * len(ids)
        return out


@pytest.fixture(scope="module")
def port(alfworld_server: str) -> Iterator[ClientEnvPort]:
    client = EnvhubClient(alfworld_server)
    yield ClientEnvPort(client, "alfworld")
    client.close()


def _rollout(port: ClientEnvPort, backend: object, tokenizer: object, **settings: object) -> GroupRollout:
    renderer = PromptRenderer("alfworld", style="compact")
    return GroupRollout(port, backend, tokenizer, renderer, RolloutSettings(**settings))  # type: ignore[arg-type]


def test_groups_batch_generation_and_record_turns(port: ClientEnvPort, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    scripted = _ScriptedBackend(backend, tok, ["<action>look</action>", "no tags", "<action>inventory</action>"])
    rollout = _rollout(port, scripted, tok, group_size=3, max_turns=3, snapshots=True)
    try:
        trajs, stats = rollout.run([("train/00001", 7), ("train/00002", 7)], SamplingSettings(max_new_tokens=8))
    finally:
        rollout.close()
    assert scripted.batch_sizes == [6, 6, 6]  # one generate call per turn for all six sessions
    assert [t.group for t in trajs] == [0, 0, 0, 1, 1, 1]
    assert all(t.num_turns == 3 and t.done and not t.dropped for t in trajs)
    assert stats.turns == 18 and stats.invalid_turns == 6
    first = trajs[0].turns[0]
    assert first.action == "look" and first.snapshot and first.admissible and first.prompt_ids
    assert first.observation.startswith("You are in the middle of a room")
    invalid = trajs[1].turns[0]
    assert invalid.action is None and invalid.observation == INVALID_ACTION_OBSERVATION
    # forked sessions start from identical states
    assert trajs[0].turns[0].prompt_ids == trajs[1].turns[0].prompt_ids == trajs[2].turns[0].prompt_ids


def test_failed_step_is_retried_from_the_snapshot_or_dropped(port: ClientEnvPort, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    too_long = "<action>" + "x" * 5000 + "</action>"  # the server refuses actions over 4 KiB
    for snapshots, retries in ((True, 1), (False, 0)):
        rollout = _rollout(port, _ScriptedBackend(backend, tok, [too_long]), tok, group_size=2, max_turns=2,
                           snapshots=snapshots)  # fmt: skip
        try:
            trajs, stats = rollout.run([("train/00003", 1)], SamplingSettings(max_new_tokens=4))
        finally:
            rollout.close()
        assert all(t.dropped == "ACTION_TOO_LONG" for t in trajs)
        assert stats.dropped["ACTION_TOO_LONG"] == 2 and stats.retries == 2 * retries


def test_real_sampling_end_to_end(port: ClientEnvPort, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    rollout = _rollout(port, backend, tok, group_size=2, max_turns=2)
    try:
        trajs, stats = rollout.run([("train/00004", 3)], SamplingSettings(max_new_tokens=12, seed=5))
    finally:
        rollout.close()
    assert stats.generated_tokens == sum(len(turn.response_ids) for t in trajs for turn in t.turns) > 0
    for turn in (turn for t in trajs for turn in t.turns):
        assert len(turn.logp_old) == len(turn.response_ids) and all(lp <= 0 for lp in turn.logp_old)
