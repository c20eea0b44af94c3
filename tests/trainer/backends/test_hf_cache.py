"""The hf backend's kept KV cache and prefix-shared scoring: fp32 parity with fresh prefills, reuse, LRU bound."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.backends.base import SamplingSettings
from trainer.backends.hf import prefix_leaves

FOLLOW_UP = [[11, 12, 13], [21, 22], [31, 32, 33, 34], [41]]
"""Per session, the tokens appended after each response (the environment's follow-up user turn)."""


def _chat(
    backend: HFBackend, prompts: list[list[int]], sampling: SamplingSettings, turns: int
) -> list[list[tuple[list[int], list[int], list[float]]]]:
    """Full-context chats: each turn's prompt is the previous prompt + response + a follow-up.
    Per turn, per session: (prompt, response, log-probs)."""
    history = []
    current = [list(p) for p in prompts]
    for turn in range(turns):
        settings = SamplingSettings(**{**sampling.__dict__, "seed": (sampling.seed or 0) + turn})
        gens = backend.generate(current, settings)
        history.append([(p, g.token_ids, g.logprobs) for p, g in zip(current, gens, strict=True)])
        current = [p + g.token_ids + FOLLOW_UP[i] for i, (p, g) in enumerate(zip(current, gens, strict=True))]
    return history


def _backends(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, mb: float, decode_attention: str | None = None
) -> tuple[HFBackend, HFBackend]:
    """A backend keeping `mb` of cache (decode steps under `decode_attention`) and one as before: no kept cache, the
    model's own attention throughout."""

    def build(kv_cache_mb: float, attention: str | None) -> HFBackend:
        return HFBackend(
            model,
            eos_token_ids=[tokenizer.eos_token_id],
            pad_token_id=tokenizer.pad_token_id,
            kv_cache_mb=kv_cache_mb,
            decode_attention=attention,
        )

    return build(mb, decode_attention), build(0, None)


@pytest.mark.parametrize("decode_attention", [None, "eager"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kept_cache_gives_the_same_tokens_and_logprobs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    temperature: float,
    decode_attention: str | None,
) -> None:
    """fp32: the kept cache, with decode steps under eager attention or the model's own (SDPA), gives today's
    tokens and log-probs (fresh prefills, SDPA throughout)."""
    cached, fresh = _backends(model, tokenizer, 64, decode_attention)
    sampling = SamplingSettings(max_new_tokens=6, temperature=temperature, seed=5)
    used: list[str] = []
    hook = model.register_forward_pre_hook(lambda module, _: used.append(module.config._attn_implementation))
    try:
        got = _chat(cached, prompts, sampling, 4)
    finally:
        hook.remove()
    want = _chat(fresh, prompts, sampling, 4)
    assert model.config._attn_implementation == "sdpa"  # given back after each batch
    # per turn: the prefill in the model's own attention, then 5 decode steps in `decode_attention`
    assert used == (["sdpa"] + [decode_attention or "sdpa"] * 5) * 4
    for turn_got, turn_want in zip(got, want, strict=True):
        for (p1, r1, l1), (p2, r2, l2) in zip(turn_got, turn_want, strict=True):
            assert (p1, r1) == (p2, r2)
            torch.testing.assert_close(torch.tensor(l1), torch.tensor(l2), atol=1e-5, rtol=0)
    assert cached.kv_store is not None and fresh.kv_store is None
    assert cached.kv_store.hits == 3 * len(prompts)  # every turn after the first extends the kept rows
    assert len(cached.kv_store) == len(prompts)  # the extended entries were replaced, not added to


def test_rows_with_and_without_a_kept_prefix_share_a_batch(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    cached, fresh = _backends(model, tokenizer, 64)
    greedy = SamplingSettings(max_new_tokens=5, temperature=0.0)
    first = cached.generate(prompts[:2], greedy)
    mixed = [prompts[0] + first[0].token_ids + [7, 8], prompts[2], prompts[1] + first[1].token_ids + [9]]
    got, want = cached.generate(mixed, greedy), fresh.generate(mixed, greedy)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-5, rtol=0)
    assert cached.kv_store is not None and cached.kv_store.hits == 2


def test_a_prompt_that_extends_nothing_prefills_and_weights_drop_the_cache(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    cached, _ = _backends(model, tokenizer, 64)
    greedy = SamplingSettings(max_new_tokens=4, temperature=0.0)
    cached.generate(prompts, greedy)
    assert cached.kv_store is not None and len(cached.kv_store) == len(prompts)
    cached.generate([[3] + prompts[0]], greedy)
    assert cached.kv_store.hits == 0
    cached.update_weights(model.state_dict())
    assert len(cached.kv_store) == 0 and cached.kv_store.nbytes == 0


def test_the_cache_stays_within_its_bound(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    config = model.config
    per_position = config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim * 4
    longest = max(len(p) for p in prompts) + 2  # kept: prompt + 3 generated tokens but the last
    cached, _ = _backends(model, tokenizer, 1.5 * longest * per_position / 2**20)
    assert cached.kv_store is not None
    cached.generate(prompts, SamplingSettings(max_new_tokens=3, temperature=0.0))
    assert 0 < len(cached.kv_store) < len(prompts)
    assert 0 < cached.kv_store.nbytes <= cached.kv_store.max_bytes


def test_prefix_shared_scoring_equals_scoring_each_row_alone(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    _, fresh = _backends(model, tokenizer, 0)
    chats = _chat(fresh, prompts, SamplingSettings(max_new_tokens=5, temperature=1.0, seed=3), 3)
    rows = [(p, r) for turn in chats for p, r, _ in turn] + [(prompts[0], [])]
    shared = fresh.score([p for p, _ in rows], [r for _, r in rows])
    assert len(prefix_leaves([p + r for p, r in rows])[0]) == len(prompts)  # one forward per chat
    for (prompt, response), got in zip(rows, shared, strict=True):
        alone = fresh.score([prompt], [response])[0]
        assert len(got) == len(response)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(alone), atol=1e-5, rtol=0)


def test_prefix_leaves_maps_each_row_to_the_longest_row_containing_it() -> None:
    rows = [[1, 2], [1, 2, 3, 4], [5], [1, 2, 3], [5, 6], [7]]
    leaves, leaf_of = prefix_leaves(rows)
    assert sorted(leaves) == [1, 4, 5]
    assert [leaves[k] for k in leaf_of] == [1, 1, 4, 1, 4, 5]


def test_a_level_two_sleep_frees_the_weights_until_new_ones_are_loaded(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]
) -> None:
    """The colocated learner update's order (docs/gpu.md): sleep(2), the update, wake(weights), the weights pushed,
    wake(kv_cache); a level-1 sleep (the teacher's) keeps them."""
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    backend, _ = _backends(copy.deepcopy(model), tokenizer, 64)
    greedy = SamplingSettings(max_new_tokens=5, temperature=0.0)
    want = backend.generate(prompts, greedy)
    backend.sleep(1)
    assert backend.generate(prompts, greedy) == want
    backend.sleep(2)
    assert sum(p.numel() for p in backend.model.parameters()) == 0
    with pytest.raises(RuntimeError, match="update_weights must come first"):
        backend.score(prompts, [g.token_ids for g in want])
    backend.wake_up(["weights"])
    with pytest.raises(RuntimeError, match="update_weights must come first"):
        backend.generate(prompts, greedy)
    backend.update_weights(state)
    backend.wake_up(["kv_cache"])
    assert backend.generate(prompts, greedy) == want
    assert list(backend.memory_events) == ["sleep:1", "sleep:2", "wake:weights", "load_weights", "wake:kv_cache"]
