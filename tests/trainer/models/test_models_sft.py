"""SFT: the loss covers response tokens only, and a tiny model learns a copy-the-target task fast."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.backends.base import SamplingSettings
from trainer.config import OptimConfig
from trainer.models import make_tiny_model, train_tokenizer
from trainer.sft import (
    FINAL_LR_SHARE,
    _collate,
    evaluate_exact_match,
    learner_budget,
    response_loss,
    sft_lr_factor,
    sft_train,
)

RECEPTACLES = ["countertop", "fridge", "cabinet", "drawer", "shelf", "sinkbasin", "microwave", "desk", "sofa"]
VERBS = ["go to", "open", "close", "examine"]


def _pair(verb: str, receptacle: str, number: int) -> tuple[str, str]:
    return (
        f"Your task is to: {verb} the {receptacle} number {number}. Act:",
        f"<action>{verb} {receptacle} {number}</action>",
    )


def test_collate_supervises_response_tokens_only() -> None:
    ids, mask, labels = _collate([([5, 6, 7], [8, 9]), ([5], [10])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 10, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, 10, -100, -100, -100]]
    padded, _, _ = _collate([([5, 6, 7], [8, 9])], pad_id=0, width_multiple=4)
    assert padded.tolist() == [[5, 6, 7, 8, 9, 0, 0, 0]]


SFT_BF16_LOSS_TOL = 2e-3
"""Stated tolerance: |targets-only loss - transformers' loss| both under CPU bf16 autocast (tiny model)."""


def test_targets_only_loss_equals_the_full_logits_loss(tokenizer: PreTrainedTokenizerBase) -> None:
    """fp32 parity (1e-5) of the loss projected only at target positions with transformers' loss over every
    position, values and gradients; under bf16 autocast within `SFT_BF16_LOSS_TOL` (docs/design/029)."""
    model = make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)
    examples = [
        (tokenizer.encode(p), tokenizer.encode(r))
        for p, r in itertools.starmap(_pair, [("open", "fridge", 1), ("go to", "desk", 12), ("examine", "sofa", 3)])
    ]
    ids, mask, labels = _collate(examples, tokenizer.pad_token_id)
    grads = []
    for targets_only in (True, False):
        model.zero_grad()
        loss = response_loss(model, ids, mask, labels, targets_only=targets_only)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_new, grad_new), (loss_old, grad_old) = grads
    torch.testing.assert_close(loss_new, loss_old, atol=1e-5, rtol=0)
    for a, b in zip(grad_new, grad_old, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        new, old = (response_loss(model, ids, mask, labels, targets_only=t) for t in (True, False))
    assert abs(float(new) - float(old)) <= SFT_BF16_LOSS_TOL


def test_exact_match_counts_token_for_token(tokenizer: PreTrainedTokenizerBase) -> None:
    model = make_tiny_model(tokenizer, seed=3)
    prompts = [tokenizer.encode(t) for t in ["go to", "open the", "look"]]
    backend = HFBackend(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
    greedy = [g.token_ids for g in backend.generate(prompts, SamplingSettings(max_new_tokens=4, temperature=0.0))]
    wrong_last = [*greedy[2][:-1], (greedy[2][-1] + 1) % len(tokenizer)]
    examples = [(prompts[0], greedy[0]), (prompts[1], greedy[1]), (prompts[2], wrong_last)]
    assert evaluate_exact_match(model, tokenizer, examples) == 2 / 3


@pytest.mark.parametrize("bf16", [False, True])
def test_exact_match_generates_under_bf16_autocast_when_asked(tokenizer: PreTrainedTokenizerBase, bf16: bool) -> None:
    model = make_tiny_model(tokenizer, seed=3)
    dtypes: set[torch.dtype] = set()
    model.lm_head.register_forward_hook(lambda _m, _i, out: dtypes.add(out.dtype))
    examples = [(tokenizer.encode("go to"), tokenizer.encode(" the desk"))]
    assert 0.0 <= evaluate_exact_match(model, tokenizer, examples, cpu_bf16=bf16) <= 1.0
    assert dtypes == {torch.bfloat16 if bf16 else torch.float32}
    assert next(model.parameters()).dtype == torch.float32  # fp32 master weights, only the matmuls in bf16


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny matrices train faster on one thread, and far faster on a shared, oversubscribed machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_thread")
def test_sft_learns_held_out_pairs() -> None:
    combos = list(itertools.product(VERBS, RECEPTACLES, range(1, 6)))
    random.Random(0).shuffle(combos)
    tokenizer = train_tokenizer([" ".join(_pair(*c)) for c in combos], vocab_size=512)

    def encode(combo: tuple[str, str, int]) -> tuple[list[int], list[int]]:
        prompt, response = _pair(*combo)
        return tokenizer.encode(prompt), [*tokenizer.encode(response), tokenizer.eos_token_id]

    train, held_out = [encode(c) for c in combos[:150]], [encode(c) for c in combos[150:]]
    model = make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)
    assert evaluate_exact_match(model, tokenizer, held_out) < 0.1
    logged: list[dict[str, float]] = []
    result = sft_train(model, tokenizer, train, steps=150, lr=3e-3, batch_tokens=1024, seed=0, log_fn=logged.append)
    assert result["last_loss"] < 0.1 * result["first_loss"]
    assert [entry["step"] for entry in logged] == [float(s) for s in range(10, 151, 10)]
    assert evaluate_exact_match(model, tokenizer, held_out) >= 0.9
    assert {entry["lr"] for entry in logged} == {3e-3}  # the default schedule is constant


def test_cosine_schedule_warms_up_then_decays_to_its_floor() -> None:
    factors = [sft_lr_factor("cosine", done, 100) for done in range(100)]
    assert factors[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])  # 5 % warm-up
    assert all(a >= b for a, b in itertools.pairwise(factors[4:]))
    assert factors[-1] == pytest.approx(FINAL_LR_SHARE, abs=0.01)
    assert sft_lr_factor("constant", 50, 100) == 1.0
    with pytest.raises(ValueError, match="unknown SFT schedule"):
        sft_lr_factor("linear", 0, 10)  # type: ignore[arg-type]


def test_sft_follows_the_cosine_schedule(tokenizer: PreTrainedTokenizerBase) -> None:
    model = make_tiny_model(tokenizer, seed=0)
    examples = [(tokenizer.encode("go to"), [*tokenizer.encode("<action>look</action>"), tokenizer.eos_token_id])]
    logged: list[dict[str, float]] = []
    sft_train(model, tokenizer, examples, steps=20, lr=1e-2, log_fn=logged.append, log_every=1, schedule="cosine")
    assert [entry["lr"] for entry in logged] == pytest.approx(
        [1e-2 * sft_lr_factor("cosine", d, 20) for d in range(20)]
    )


@pytest.mark.usefixtures("one_thread")
def test_micro_batches_accumulate_the_whole_batch_step(tokenizer: PreTrainedTokenizerBase) -> None:
    """fp32: a batch's forward and backward in parts of at most 24 tokens (one or two examples each) takes the step
    of the whole batch at once: the same losses and weights."""
    pairs = [_pair(v, r, n) for v, r, n in itertools.product(VERBS[:2], RECEPTACLES[:3], range(1, 3))]
    examples = [(tokenizer.encode(p), [*tokenizer.encode(r), tokenizer.eos_token_id]) for p, r in pairs]
    results = []
    for micro, multiple in ((0, 1), (24, 1), (24, 16)):  # 16: parts padded to a multiple of 16 tokens (note 039)
        model = make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)
        result = sft_train(
            model,
            tokenizer,
            examples,
            steps=2,
            lr=1e-2,
            batch_tokens=128,
            micro_batch_tokens=micro,
            micro_batch_width_multiple=multiple,
        )
        results.append((result, [p.detach() for p in model.parameters()]))
    (whole, want), *parts = results
    # Padded matmuls round differently, and Adam's normalised steps (lr 1e-2) carry that to up to ~3e-4 on a few
    # weights whose gradient is near 0; a wrong gradient would move weights by ~lr.
    for (split, got), atol in zip(parts, (1e-5, 1e-3), strict=True):
        assert split["first_loss"] == pytest.approx(whole["first_loss"], rel=1e-5)
        assert split["last_loss"] == pytest.approx(whole["last_loss"], rel=1e-5)
        assert split["tokens"] == whole["tokens"]
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=atol, rtol=1e-4)


def test_an_sft_under_a_config_takes_its_learners_budget(tokenizer: PreTrainedTokenizerBase) -> None:
    """The ladder's, DAgger's and the quickstart's SFT micro-batch and pad as the config's learner does: its AdamW
    implementation, token budget and width multiple reach `sft_train` (the ladder's had left them at their defaults,
    one width per batch)."""
    optim = OptimConfig(micro_batch_tokens=24, micro_batch_width_multiple=16, adamw="foreach")
    budget = learner_budget(optim)
    assert budget == {
        "adamw": "foreach",
        "micro_batch_tokens": 24,
        "micro_batch_width_multiple": 16,
        "train_embeddings": True,
    }
    examples = [
        (tokenizer.encode(p), [*tokenizer.encode(r), tokenizer.eos_token_id]) for p, r in [_pair("open", "fridge", 1)]
    ]
    result = sft_train(make_tiny_model(tokenizer, seed=0), tokenizer, examples * 3, steps=1, batch_tokens=128, **budget)
    assert result["steps"] == 1  # the keywords are sft_train's own


def test_an_sft_with_frozen_embeddings_leaves_the_table_and_trains_the_rest(tokenizer: PreTrainedTokenizerBase) -> None:
    """`train_embeddings` False (`optim.train_embeddings`): the tied embedding table and output projection keep
    their values through the SFT while every other weight moves, and the table trains again afterwards."""
    examples = [
        (tokenizer.encode(p), [*tokenizer.encode(r), tokenizer.eos_token_id]) for p, r in [_pair("open", "fridge", 1)]
    ]
    model = make_tiny_model(tokenizer, seed=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    sft_train(model, tokenizer, examples * 3, steps=3, lr=1e-2, batch_tokens=128, train_embeddings=False)
    table = model.get_input_embeddings().weight
    assert table is model.get_output_embeddings().weight  # tied: one frozen tensor
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) == (p is table), name
    assert table.requires_grad
