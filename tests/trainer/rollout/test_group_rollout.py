"""GroupRollout against a real envhub ALFWorld server on loopback, with the tiny student."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from envhub.client import Sessions
from envhub.client.formats import INVALID_ACTION_OBSERVATION, action_format
from envhub.client.sync import EnvhubClient
from envhub.core.errors import EnvhubError
from trainer.backends.base import Generation
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import PromptRenderer
from trainer.rollout import GroupRollout, RolloutSettings, SamplingSettings
from trainer.rollout.dagger import expert_labels
from trainer.rollout.group import TurnProgress

STOP_STRINGS = action_format("alfworld").stop


class _ScriptedBackend:
    """Wraps the real tiny model but forces chosen response texts (to test parsing and invalid turns)."""

    def __init__(self, inner: HFBackend, tokenizer: object, texts: list[str], finish_reason: str = "stop") -> None:
        self.inner, self.tokenizer, self.texts, self.finish_reason = inner, tokenizer, texts, finish_reason
        self.batch_sizes: list[int] = []

    def generate(self, prompts: list[list[int]], sampling: SamplingSettings) -> list[Generation]:
        self.batch_sizes.append(len(prompts))
        out = self.inner.generate(prompts, sampling)
        for i, gen in enumerate(out):
            ids = self.tokenizer.encode(self.texts[i % len(self.texts)], add_special_tokens=False)  # type: ignore[attr-defined]
            gen.token_ids, gen.logprobs, gen.finish_reason = ids, [-1.0] * len(ids), self.finish_reason  # type: ignore[assignment]
        return out


@pytest.fixture(scope="module")
def port(alfworld_server: str) -> Iterator[Sessions]:
    client = EnvhubClient(alfworld_server)
    yield Sessions(client, "alfworld")
    client.close()


def _rollout(port: Sessions, backend: object, tokenizer: object, **settings: object) -> GroupRollout:
    renderer = PromptRenderer("alfworld", style="compact")
    return GroupRollout(port, backend, tokenizer, renderer, RolloutSettings(**settings))  # type: ignore[arg-type]


def test_groups_batch_generation_and_record_turns(port: Sessions, tiny_models: TinyModels) -> None:
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


def test_failed_step_is_retried_from_the_snapshot_or_dropped(port: Sessions, tiny_models: TinyModels) -> None:
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


def test_real_sampling_end_to_end(port: Sessions, tiny_models: TinyModels) -> None:
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


@pytest.mark.parametrize("policy", ["invalid", "mask"])
def test_truncated_responses_follow_the_policy(port: Sessions, tiny_models: TinyModels, policy: str) -> None:
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    scripted = _ScriptedBackend(backend, tok, ["<action>look</action>"], finish_reason="length")
    rollout = _rollout(port, scripted, tok, group_size=2, max_turns=2, truncation=policy)
    try:
        trajs, stats = rollout.run([("train/00005", 2)], SamplingSettings(max_new_tokens=4))
    finally:
        rollout.close()
    turns = [turn for t in trajs for turn in t.turns]
    assert turns and all(turn.finish_reason == "length" for turn in turns)
    assert stats.as_metrics()["rollout/truncated_turn_ratio"] == 1.0
    if policy == "invalid":  # the papers' behaviour: an invalid action, trained like any turn
        assert all(turn.action is None and turn.observation == INVALID_ACTION_OBSERVATION for turn in turns)
        assert not any(turn.masked for turn in turns)
        assert SyncGroups().compose(trajs).loss_mask.any()
    else:  # sent as parsed, never supervised
        assert all(turn.action == "look" and turn.masked for turn in turns)
        with pytest.raises(ValueError, match="every student turn was masked"):
            SyncGroups().compose(trajs)


def test_long_prompts_lose_history_never_the_instruction(port: Sessions, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    renderer = PromptRenderer("alfworld", style="atod", history_length=2)
    scripted = _ScriptedBackend(backend, tok, ["<action>look</action>"])
    limits = {}
    for limit in (100_000, 0):
        settings = RolloutSettings(group_size=1, max_turns=3, max_prompt_tokens=limit or limits["first"] + 8)
        rollout = GroupRollout(port, scripted, tok, renderer, settings)  # type: ignore[arg-type]
        try:
            trajs, stats = rollout.run([("train/00006", 4)], SamplingSettings(max_new_tokens=4))
        finally:
            rollout.close()
        prompts = [turn.prompt_ids for turn in trajs[0].turns]
        limits.setdefault("first", len(prompts[0]))
        limits.setdefault("last", len(prompts[-1]))
    # With the budget of the first (history-free) prompt, later turns show less history, not a cut head.
    assert limits["last"] > limits["first"] + 8
    assert all(len(p) <= limits["first"] + 8 for p in prompts) and stats.trimmed_prompts == 2
    texts = [tok.decode(p) for p in prompts]
    heads = {text[: text.index("Prior to this step")] for text in texts}  # chat template head + task line
    assert len(heads) == 1 and "Your task is to" in heads.pop()
    assert len({text[-120:] for text in texts}) == 1  # the closing instructions and assistant header


def test_env_options_reach_the_server(alfworld_server: str) -> None:
    client = EnvhubClient(alfworld_server)
    try:
        port = Sessions(client, "alfworld", options={"no_such_option": "1"})
        with pytest.raises(EnvhubError) as caught:
            port.start("train/00001", seed=0, max_steps=2)
        assert caught.value.reason == "BAD_OPTION"
    finally:
        client.close()


def test_full_context_continues_one_chat_and_reports_each_turn(port: Sessions, tiny_models: TinyModels) -> None:
    """`full` mode with a real template that adds a default system prompt (Qwen2.5's, as TRL ships it): each turn's
    prompt is the previous prompt + response + the follow-up user turn; the system prompt appears once."""
    trl = pytest.importorskip("trl")
    from importlib import resources

    tok = load_tokenizer(tiny_models.student)
    tok.chat_template = (resources.files(trl) / "chat_templates" / "qwen2_5.jinja").read_text()
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    scripted = _ScriptedBackend(backend, tok, ["<action>look</action><|im_end|>"])
    renderer = PromptRenderer("alfworld", style="compact", context="full")
    rollout = GroupRollout(port, scripted, tok, renderer, RolloutSettings(group_size=2, max_turns=3))  # type: ignore[arg-type]
    heard: list[TurnProgress] = []
    try:
        trajs, _ = rollout.run([("train/00004", 0)], SamplingSettings(max_new_tokens=8), on_turn=heard.append)
    finally:
        rollout.close()
    assert heard == [TurnProgress(1, 0, 2), TurnProgress(2, 0, 2), TurnProgress(3, 2, 2)]
    turns = trajs[0].turns
    assert len(turns) == 3
    for before, after in itertools.pairwise(turns):
        assert after.prompt_ids[: len(before.prompt_ids) + len(before.response_ids)] == [
            *before.prompt_ids,
            *before.response_ids,
        ]
    last = tok.decode(turns[-1].prompt_ids)
    assert last.count("You are Qwen, created by Alibaba Cloud") == 1 and last.count("<|im_start|>user\n") == 3
    assert last.endswith("<|im_start|>assistant\n") and "<|im_end|>\n<|im_start|>user\nObservation: " in last


@pytest.mark.slow  # ~35 s at load 10 (two rollouts)
def test_full_context_rollout_with_the_kept_cache_equals_fresh_prefills(
    port: Sessions, tiny_models: TinyModels
) -> None:
    """A real full-context rollout (each turn's prompt extends the last): the hf backend's kept KV cache is used
    and the trajectories are the ones every-turn prefills give, token for token (fp32, seeded sampling)."""
    tok = load_tokenizer(tiny_models.student)
    renderer = PromptRenderer("alfworld", style="compact", context="full")
    runs = []
    for kv_cache_mb in (64, 0):
        backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS, kv_cache_mb=kv_cache_mb)
        rollout = GroupRollout(port, backend, tok, renderer, RolloutSettings(group_size=2, max_turns=3))
        try:
            trajs, _ = rollout.run([("train/00004", 0), ("train/00005", 0)], SamplingSettings(max_new_tokens=6, seed=3))
        finally:
            rollout.close()
        runs.append((backend, trajs))
    (cached, got), (_, want) = runs
    assert cached.kv_store is not None and cached.kv_store.hits >= 4  # turns 2 and 3 of at least 2 sessions
    for a, b in zip(got, want, strict=True):
        assert [(t.prompt_ids, t.response_ids) for t in a.turns] == [(t.prompt_ids, t.response_ids) for t in b.turns]
        for ta, tb in zip(a.turns, b.turns, strict=True):
            assert max(abs(x - y) for x, y in zip(ta.logp_old, tb.logp_old, strict=True)) < 1e-5


@pytest.mark.parametrize("mode", ["exact", "nearest"])
def test_an_action_off_the_list_is_sent_as_written_or_as_the_nearest_listed(
    port: Sessions, tiny_models: TinyModels, mode: str
) -> None:
    """`action_match`: under `exact` the reply's unknown action reaches the game ("Nothing happens."); under
    `nearest` the most similar admissible action is sent, recorded as the turn's action (the history shows it,
    DAgger's replay follows it without diverging), the reply's own tokens and text kept; a listed action is sent
    as written either way."""
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    replies = ["<action>go to the moon 7</action>", "<action>look</action>"]
    rollout = _rollout(port, _ScriptedBackend(backend, tok, replies), tok, group_size=2, max_turns=3, action_match=mode)
    try:
        trajs, stats = rollout.run([("train/00001", 0)], SamplingSettings(max_new_tokens=16))
    finally:
        rollout.close()
    off, listed = trajs
    assert all(
        "look" in turn.admissible and turn.action == "look" and turn.matched_from is None for turn in listed.turns
    )
    assert all(tok.decode(turn.response_ids) == turn.response_text == replies[0] for turn in off.turns)
    later_prompts = [turn.prompt_text for turn in off.turns[1:]]
    if mode == "exact":
        assert stats.matched_turns == 0 and stats.as_metrics()["rollout/matched_turn_ratio"] == 0.0
        assert all(turn.action == "go to the moon 7" and turn.matched_from is None for turn in off.turns)
        assert all(turn.observation == "Nothing happens." for turn in off.turns)
        assert all("go to the moon 7" in prompt for prompt in later_prompts)
        return
    assert stats.matched_turns == 3 and stats.as_metrics()["rollout/matched_turn_ratio"] == 3 / 6
    for turn in off.turns:
        assert turn.matched_from == "go to the moon 7" and turn.action in turn.admissible
        assert turn.action.startswith("go to ") and turn.observation != "Nothing happens."
    assert all("go to the moon 7" not in prompt and off.turns[0].action in prompt for prompt in later_prompts)
    replay = expert_labels(port, off, max_turns=3)
    assert not replay.diverged and len(replay.prompts) == len(off.turns)


@pytest.mark.parametrize("mode", ["constrained", "choice"])
def test_constrained_replies_are_always_listed_actions(port: Sessions, tiny_models: TinyModels, mode: str) -> None:
    """`constrained` and `choice`: the random tiny student, left to itself, only ever sends listed actions (none
    invalid, none replaced), its reply's text is the action's reply and its log-probs are the model's own."""
    tok = load_tokenizer(tiny_models.student)
    backend = HFBackend.from_pretrained(tiny_models.student, stop=STOP_STRINGS)
    rollout = _rollout(port, backend, tok, group_size=2, max_turns=4, action_match=mode)
    tasks, sampling = [("train/00001", 0), ("train/00002", 0)], SamplingSettings(max_new_tokens=24, seed=3)
    try:
        trajs, stats = rollout.run(tasks, sampling)
    finally:
        rollout.close()
    turns = [turn for traj in trajs for turn in traj.turns]
    assert stats.turns == len(turns) > 0 and stats.invalid_turns == stats.matched_turns == 0
    for turn in turns:
        assert turn.action in turn.admissible and turn.matched_from is None
        assert turn.response_text == f"<action>{turn.action}</action>"
        assert all(lp <= 0 for lp in turn.logp_old)
    unconstrained = _rollout(port, backend, tok, group_size=2, max_turns=4)
    try:
        _, free = unconstrained.run(tasks, sampling)
    finally:
        unconstrained.close()
    assert free.invalid_turns > 0  # the same model left free writes replies that name no action
