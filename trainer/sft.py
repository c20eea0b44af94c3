"""Supervised fine-tuning on (prompt ids, response ids) pairs: the loss is on response tokens only."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.adamw import AdamwImpl, make_adamw
from trainer.backends.base import SamplingSettings
from trainer.backends.hf import HFBackend
from trainer.learner_dist import LogprobModel
from trainer.lr_schedule import LrSchedule, lr_factor
from trainer.models.loading import embeddings_frozen, trainable_parameters
from trainer.precision import autocast

if TYPE_CHECKING:
    from trainer.config import OptimConfig

Example = tuple[list[int], list[int]]
"""(prompt token ids, response token ids); the response usually ends with EOS."""
WARMUP_SHARE = 0.05
"""`cosine` schedule: share of the steps spent warming the learning rate up linearly from lr / warm-up steps."""
FINAL_LR_SHARE = 0.1
"""`cosine` schedule: the last step's learning rate as a share of `lr`."""
LOSS_CHUNK_TOKENS = 1024
"""Target positions projected to the vocabulary at a time (as the learner's `optim.logprob_chunk_tokens`)."""


def sft_lr_factor(schedule: LrSchedule, done: int, steps: int) -> float:
    """Learning-rate multiplier before step `done + 1` of `steps` under `schedule` (see `sft_train`)."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"unknown SFT schedule {schedule!r}; known: constant, cosine")
    warmup = max(1, round(WARMUP_SHARE * steps)) if schedule == "cosine" else 0
    return lr_factor(schedule, done, steps, warmup=warmup, final=FINAL_LR_SHARE)


def _collate(
    batch: Sequence[Example], pad_id: int, width_multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad -> (input_ids, attention_mask, labels) with labels -100 outside the responses. (B, S) each, S the
    longest example rounded up to a multiple of `width_multiple`."""
    longest = max(len(p) + len(r) for p, r in batch)
    width = -(-longest // width_multiple) * width_multiple
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, (prompt, response) in enumerate(batch):
        row = torch.tensor(list(prompt) + list(response), dtype=torch.long)
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        labels[i, len(prompt) : len(row)] = row[len(prompt) :]
    return ids, mask, labels


def response_loss(
    model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, *, targets_only: bool = True
) -> torch.Tensor:
    """Mean cross-entropy over the labelled tokens (labels != -100). `targets_only`: the vocabulary projection only
    at those positions, `LOSS_CHUNK_TOKENS` at a time (docs/design/029); False: transformers' loss over the logits
    of every position (the path before, the reference of the parity test and `trainer bench --speed`'s old path)."""
    if not targets_only:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    targets = labels != -100
    logp, *_ = LogprobModel(model, LOSS_CHUNK_TOKENS)(ids, mask, targets)
    return -logp[targets].sum() / targets.sum().clamp(min=1)


def learner_budget(optim: OptimConfig) -> dict[str, Any]:
    """`sft_train`'s keyword arguments for an SFT under a trainer config: its learner's AdamW implementation and
    micro-batching (`optim.adamw`, `micro_batch_tokens`, `micro_batch_width_multiple`), so that the SFT bounds its
    activations and tensor shapes as the config's learner does (docs/design/039)."""
    return {
        "adamw": optim.adamw,
        "micro_batch_tokens": optim.micro_batch_tokens,
        "micro_batch_width_multiple": optim.micro_batch_width_multiple,
        "train_embeddings": optim.train_embeddings,
    }


def _token_budget_batches(examples: Sequence[Example], batch_tokens: int, rng: random.Random) -> list[list[Example]]:
    """One shuffled epoch cut into batches of at most `batch_tokens` tokens (at least one example each)."""
    order = list(examples)
    rng.shuffle(order)
    return _pack(order, batch_tokens)


def _pack(examples: Sequence[Example], token_budget: int) -> list[list[Example]]:
    """`examples` in order, cut into consecutive parts of at most `token_budget` tokens (at least one example each;
    0: one part)."""
    parts: list[list[Example]] = [[]]
    used = 0
    for example in examples:
        size = len(example[0]) + len(example[1])
        if parts[-1] and 0 < token_budget < used + size:
            parts.append([])
            used = 0
        parts[-1].append(example)
        used += size
    return parts


def sft_train(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Example],
    *,
    steps: int,
    lr: float = 1e-3,
    batch_tokens: int = 4096,
    seed: int = 0,
    max_grad_norm: float = 1.0,
    weight_decay: float = 0.0,
    log_fn: Callable[[dict[str, float]], None] | None = None,
    log_every: int = 10,
    schedule: LrSchedule = "constant",
    cpu_bf16: bool = False,
    targets_only: bool = True,
    adamw: AdamwImpl = "auto",
    micro_batch_tokens: int = 0,
    micro_batch_width_multiple: int = 1,
    train_embeddings: bool = True,
) -> dict[str, float]:
    """Train `model` in place for `steps` AdamW steps; returns {first_loss, last_loss, steps, tokens, seconds}.

    The loss is the mean cross-entropy over response tokens of a batch of about `batch_tokens` tokens;
    gradients are clipped to `max_grad_norm`. `log_fn` receives {step, loss, grad_norm, lr} every `log_every`
    steps. `schedule`: `constant` (`lr` throughout) or `cosine` (linear warm-up over the first
    `WARMUP_SHARE` of the steps, then cosine decay to `FINAL_LR_SHARE` x `lr`). `cpu_bf16`: forward and backward
    under bf16 autocast on the CPU (fp32 weights and AdamW state; `precision.cpu_bf16`). `targets_only`: see
    `response_loss`. `adamw`: torch's AdamW implementation (`trainer.adamw`; auto: fused on the CPU).
    `micro_batch_tokens`: each batch's forward and backward in parts of at most this many tokens (at least one
    example each), gradients accumulated to the whole batch's (0: the batch at once); activations scale with it.
    `micro_batch_width_multiple`: each part padded to a multiple of this many tokens (few distinct shapes: the
    learner's `optim.micro_batch_width_multiple`, docs/design/039).
    `train_embeddings` False: the token embedding table (and a tied output projection) stays as it is, with no
    gradient or AdamW state (`optim.train_embeddings`); it trains again after the SFT.
    """
    if not examples:
        raise ValueError("sft_train needs at least one example")
    if any(not response for _, response in examples):
        raise ValueError("every example needs a non-empty response")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    with embeddings_frozen(model, not train_embeddings):
        optimizer = make_adamw(trainable_parameters(model), lr=lr, weight_decay=weight_decay, impl=adamw, device=device)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: sft_lr_factor(schedule, done, steps))
        model.train()
        pending: list[list[Example]] = []
        losses: list[float] = []
        tokens = 0
        start = time.perf_counter()
        for step in range(1, steps + 1):
            if not pending:
                pending = _token_budget_batches(examples, batch_tokens, rng)
            batch = pending.pop()
            labelled = sum(len(response) for _, response in batch)
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for part in _pack(batch, micro_batch_tokens):
                ids, mask, labels = (
                    t.to(device) for t in _collate(part, tokenizer.pad_token_id, micro_batch_width_multiple)
                )
                with autocast(device, cpu_bf16):
                    part_loss = response_loss(model, ids, mask, labels, targets_only=targets_only)
                share = sum(len(response) for _, response in part) / labelled
                (part_loss * share).backward()  # the batch's mean over labelled tokens, accumulated
                loss += float(part_loss.detach()) * share
                tokens += int(mask.sum())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            current_lr = float(scheduler.get_last_lr()[0])
            scheduler.step()
            losses.append(loss)
            if log_fn is not None and (step % log_every == 0 or step == steps):
                log_fn({"step": float(step), "loss": losses[-1], "grad_norm": float(grad_norm), "lr": current_lr})
    model.eval()
    return {
        "first_loss": losses[0] if losses else float("nan"),
        "last_loss": losses[-1] if losses else float("nan"),
        "steps": float(steps),
        "tokens": float(tokens),
        "seconds": time.perf_counter() - start,
    }


def evaluate_exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Example],
    *,
    batch_size: int = 64,
    cpu_bf16: bool = False,
) -> float:
    """Fraction of examples whose greedy response equals the target response token for token; `cpu_bf16`: generated
    under bf16 autocast on the CPU (as `sft_train`'s forward; SmolLM2's 135M in fp32 took minutes per evaluation)."""
    if not examples:
        raise ValueError("evaluate_exact_match needs at least one example")
    backend = HFBackend(
        model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id, batch_size=batch_size
    )
    longest = max(len(response) for _, response in examples)
    with autocast(next(model.parameters()).device, cpu_bf16):
        generations = backend.generate(
            [list(p) for p, _ in examples], SamplingSettings(max_new_tokens=longest, temperature=0.0)
        )
    hits = sum(gen.token_ids == list(target) for gen, (_, target) in zip(generations, examples, strict=True))
    return hits / len(examples)
