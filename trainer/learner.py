"""The learner: advantages from the registry, PPO-clipped loss, AdamW with gradient accumulation.

One `Learner.step(batch)`:
0. with `recompute_logp_old` (the rollout engine's numbers are not the learner's, e.g. vLLM or the hf
   backend in bf16), the PPO ratio's `logp_old` is the learner's own log-prob at the current parameters:
   when the step makes one update (`optim.epochs` 1, the on-policy case) and `optim.logp_old_from_update`,
   it is the update forward's own log-prob, detached (verl's dp_actor `on_policy`; no extra forward, the
   advantages read the rollout's recorded log-probs); otherwise a separate forward recomputes it first and
   the advantages and the ratio both use it (docs/design/033);
1. advantages `(N, S)` from the objective registered under `objective.name` (the learner never
   knows which objective runs);
2. the rows are cut into `optim.mini_batches` contiguous mini-batches, one optimizer update each (the advantages
   are the whole batch's; each mini-batch's loss is its own tokens' mean under the reduction), `optim.epochs`
   times; each mini-batch's rows are cut into micro-batches by a token budget; each micro-batch recomputes `logp` under
   the current parameters and adds its share of the loss (each token's weight in the reduction is
   computed once on its whole mini-batch, so accumulation gives exactly the mini-batch's gradient even when
   a trajectory's turn rows fall into different micro-batches); the step's `actor/*` metrics are the last pass's,
   averaged over its mini-batches by supervised tokens;
2b. with an objective's `kl_over: replies`, the turns drawn among listed replies add the exact KL of the student's
   choice from the teacher's over each list (`trainer.objectives.listed`, docs/design/042), each turn's weighted as
   the objective says (ATOD: its T-DUR weight, docs/design/046); with `rl_over: replies` their RL advantage moves
   off their tokens to PPO's term on the drawn reply's probability over the list (`trainer.objectives.reply_rl`,
   docs/design/047), from the same forward; when every token advantage is then 0 (OPD or GRPO with every turn
   listed) the token pass is skipped: its gradient would be 0; with `optim.listed_keep` < 1 the KL trains on that share
   of the listed turns only, those the rollout's and the teacher's scores put furthest apart (docs/design/050);
3. grad-norm clip, AdamW step (`optim.adamw`: fused on the CPU, `trainer.adamw`). bf16 autocast on CUDA,
   and on the CPU with `cpu_bf16` (fp32 master weights and AdamW state either way; `trainer.precision`).

Log-probs come from `LogprobModel` (vocabulary projection at the supervised tokens only, chunked by
`optim.logprob_chunk_tokens`; docs/design/029).
With a process group of more than one rank (`trainer.learner_dist`), the model is sharded with FSDP2,
every rank sees the whole batch (advantages and loss weights are computed on all of it: global token
normalisation) and trains on its own contiguous rows; ranks run equally many micro-batches (a rank
short of rows repeats one with zero weight) because each forward and backward is a collective.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from trainer.adamw import make_adamw
from trainer.backends.listed import listed_reply_logprobs
from trainer.config import ObjectiveConfig, OptimConfig
from trainer.errors import ObjectiveError
from trainer.learner_dist import LogprobModel, all_reduce_max, all_reduce_sum, rank_rows, shard, world
from trainer.lr_schedule import lr_factor
from trainer.memory import trim_heap
from trainer.models.loading import SHARDED_DIR, freeze_embeddings, trainable_parameters
from trainer.objectives.batch import TokenBatch
from trainer.objectives.diagnostics import LISTED_KL
from trainer.objectives.listed import ListedTurns, listed_kl, most_divergent
from trainer.objectives.loss import loss_weights, ppo_actor_loss, reduction_unit_ids
from trainer.objectives.pbr import PBR_CONSTRAINTS, PBR_EVENT_PROB, PBR_LOSS, ConstraintBatch, PbrConfig, pbr_loss
from trainer.objectives.registry import build_config, get_objective
from trainer.objectives.reply_rl import choice_entropy, drawn_logq, move_rl_to_replies, reply_policy_loss, turn_means
from trainer.precision import autocast

STATE_FILE = "trainer_state.pt"
ROLLOUT_DIFF = "actor/rollout_logp_abs_diff"
"""Mean |rollout's recorded log-prob - the learner's| over supervised tokens, where the learner's replace them."""
TOKEN_FORWARD_KL = "opd/token_forward_kl"
"""With `token_kl: forward`: the mean over the teacher-scored reply tokens of the forward KL from the teacher's
distribution over its top tokens (renormalised) to the student's, before the update (nats)."""
LISTED_AGREE = "opd/listed_agree"
"""Share of those turns where the student's most likely listed reply is the teacher's."""
LISTED_TURN_WEIGHT = "opd/listed_turn_weight"
"""Mean over those turns of each turn's own weight on its KL (ATOD's T-DUR w_k under `tdur: turn`; else 1)."""
LISTED_WEIGHT = "opd/listed_weight"
"""The weight of that KL in the loss (1 for OPD, kappa(s) for ATOD)."""
LISTED_KEPT_KL = "opd/listed_kept_kl_share"
"""With `optim.listed_keep` < 1: the share of the batch's rollout-to-teacher KL (listed replies) in the kept turns."""
CHOICE_ENTROPY = "actor/choice_entropy"
"""Mean over the turns drawn among listed replies of the entropy of the student's choice over its list (nats)."""
REPLY_PG_LOSS = "actor/reply_pg_loss"
"""The reply-level RL term's loss (`rl_over: replies`); `actor/reply_clipfrac`, `_ratio_mean`, `_approx_kl` beside."""


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, S) log-prob of each token given the previous ones (position 0 gets 0), and the
    (N, S-1, V) log-softmax that predicts positions 1..S-1 (the unchunked reference of `LogprobModel`)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask.long()).logits.float()
    log_softmax = torch.log_softmax(logits[:, :-1], dim=-1)
    logp = torch.zeros(input_ids.shape, dtype=log_softmax.dtype, device=log_softmax.device)
    logp[:, 1:] = log_softmax.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return logp, log_softmax


def _rows(values: torch.Tensor | None, part: slice) -> torch.Tensor | None:
    return None if values is None else values[part]


def own_logp_old(logp: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The update forward's `logp` as the PPO ratio's `logp_old` (`Learner.on_policy_ratio`): detached, and clamped
    at 0 in `dtype` as `Learner.recompute_old_logprobs` stores it, so the ratio is the recompute's."""
    return logp.detach().to(dtype).clamp(max=0.0)


def micro_batches(batch: TokenBatch, token_budget: int) -> Iterator[tuple[slice, int]]:
    """Consecutive row slices whose padded size (rows x longest row) fits `token_budget`, and their width."""
    return length_groups(batch.attention_mask.sum(dim=1).tolist(), token_budget)


def length_groups(lengths: list[int], token_budget: int) -> Iterator[tuple[slice, int]]:
    """`micro_batches` over rows of the given lengths."""
    start = 0
    while start < len(lengths):
        width = int(lengths[start])
        end = start + 1
        while end < len(lengths) and (end + 1 - start) * max(width, int(lengths[end])) <= token_budget:
            width = max(width, int(lengths[end]))
            end += 1
        yield slice(start, end), width
        start = end


def round_up(width: int, multiple: int, limit: int) -> int:
    """`width` rounded up to a multiple of `multiple`, at most `limit` (`optim.micro_batch_width_multiple`)."""
    return min(-(-width // multiple) * multiple, max(limit, width))


def weighted_mean(parts: list[dict[str, float]], weight: str, summed: frozenset[str] = frozenset()) -> dict[str, float]:
    """The metrics of several mini-batches, each part weighted by its `weight` entry (not returned); the names in
    `summed` (counts) add up instead."""
    total = sum(part[weight] for part in parts) or 1.0
    names = [name for name in parts[0] if name != weight] if parts else []
    return {
        name: sum(part[name] * (1.0 if name in summed else part[weight] / total) for part in parts) for name in names
    }


def batch_loss_weights(batch: TokenBatch, reduction: str) -> torch.Tensor:
    """(N, S) float64 weight of each supervised token in the whole batch's loss under `reduction`
    (its unit: the trajectory for `seq-*`, the turn for `turn-mean-token-mean`)."""
    units = reduction_unit_ids(reduction, batch.traj_ids, batch.turn_ids)
    return loss_weights(batch.loss_mask, reduction=reduction, unit_ids=units)  # type: ignore[arg-type]


class Learner:
    """Owns the student parameters and the optimizer; `step` applies one update."""

    def __init__(
        self,
        model: Any,
        objective: ObjectiveConfig,
        optim: OptimConfig,
        device: str = "cpu",
        *,
        recompute_logp_old: bool = False,
        pbr: PbrConfig | None = None,
        fsdp: bool = False,
        cpu_bf16: bool = False,
        supervised_positions: bool = True,
        total_steps: int = 0,
    ) -> None:
        if optim.lr_schedule != "constant" and total_steps < 1:
            raise ValueError(f"optim.lr_schedule {optim.lr_schedule} needs the run's total steps (got {total_steps})")
        self.total_steps = total_steps
        """The run's learner steps (`steps`): where a decaying `optim.lr_schedule` reaches its floor."""
        self.device = torch.device(device)
        self.rank, self.world_size = world()
        self.sharded = self.world_size > 1 or fsdp
        """FSDP2 over the process group: always with several ranks; `fsdp` shards a one-rank group too
        (what `make gpu-check` runs on one GPU)."""
        if optim.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if not optim.train_embeddings:
            freeze_embeddings(model)
        self.model = model.to(self.device)
        self.model.train()
        self.scorer = LogprobModel(self.model, optim.logprob_chunk_tokens)
        if self.sharded:
            self.scorer = shard(self.scorer, self.device)
        self.objective = objective
        self.spec = get_objective(objective.name)
        self.hyperparameters = build_config(objective.name, objective.params)
        self.reduction = objective.reduction or self.spec.default_reduction
        if optim.listed_keep < 1 and self.spec.rl_over_replies(self.hyperparameters):
            raise ObjectiveError(
                "optim.listed_keep < 1 trains the KL on some listed turns, and rl_over: replies needs every drawn one",
                reason="INVALID_OBJECTIVE_CONFIG",
            )
        self.optim = optim
        self.pbr = pbr
        """Protocol-boundary repair term added to the loss when the batch carries constraints (None: off)."""
        self.optimizer = make_adamw(
            trainable_parameters(self.model),
            lr=optim.lr,
            betas=optim.betas,
            weight_decay=optim.weight_decay,
            impl=optim.adamw,
            device=self.device,
            sharded=self.sharded,
        )
        self.recompute_logp_old = recompute_logp_old
        self.logp_old_from_update = optim.logp_old_from_update
        """With `recompute_logp_old` and one update per step: the ratio's `logp_old` from the update's own forward
        instead of a separate recompute (`optim.logp_old_from_update`)."""
        self.cpu_bf16 = cpu_bf16
        """Forward and backward under bf16 autocast on the CPU too (`precision.cpu_bf16`)."""
        self.supervised_positions = supervised_positions
        """Project to the vocabulary only at supervised tokens (False: at every position, the path before
        docs/design/029, kept as the reference of its parity tests and `trainer bench --speed`'s old path)."""
        self.global_step = 0
        self.ema: dict[str, torch.Tensor] | None = None
        """`optim.ema_decay`: the moving average of the parameters (fp32, by name), None when off."""
        if optim.ema_decay:
            if self.sharded:
                raise ValueError("optim.ema_decay averages the weights on one learner rank (placement.learner_gpus 1)")
            self.ema = {name: p.detach().float().clone() for name, p in self.model.named_parameters()}

    def _trim_heap(self, micro_batches: int) -> None:
        """On the CPU, every `optim.trim_heap_every` micro-batches (and at 0, an update's start): the heap's free
        pages back to the OS (docs/design/039)."""
        every = self.optim.trim_heap_every
        if every and self.device.type == "cpu" and micro_batches % every == 0:
            trim_heap()

    def step(self, batch: TokenBatch) -> dict[str, float]:
        """`optim.epochs` passes over `batch`, one optimizer update per mini-batch (`optim.mini_batches`) each;
        returns metrics."""
        start = time.perf_counter()
        self._trim_heap(0)
        batch = batch.to(self.device)
        if batch.listed is not None:  # turns of similar lengths share a chunk: less padding (every use maps by turn id)
            batch = dataclasses.replace(batch, listed=batch.listed.by_length())
        recompute_metrics: dict[str, float] = {}
        if self.separate_recompute:
            batch, recompute_metrics = self.recompute_old_logprobs(batch)
        advantages, metrics = self.spec.compute(batch, self.hyperparameters, step=self.global_step)
        metrics.update(recompute_metrics)
        token_kl = self.spec.token_kl_weights(batch, self.hyperparameters, self.global_step)
        kl_weight = self.spec.listed_weight(self.hyperparameters, self.global_step)
        rl_replies = self.spec.rl_over_replies(self.hyperparameters)
        with_listed = (kl_weight > 0 or rl_replies) and batch.listed is not None and len(batch.listed) > 0
        if with_listed and (turn_weights := self.spec.listed_turn_weights(batch, self.hyperparameters)) is not None:
            assert batch.listed is not None
            batch = dataclasses.replace(batch, listed=dataclasses.replace(batch.listed, weights=turn_weights.tolist()))
        if with_listed and kl_weight > 0 and self.optim.listed_keep < 1:
            assert batch.listed is not None
            direction = self.spec.reply_kl(self.hyperparameters)
            listed, metrics[LISTED_KEPT_KL] = most_divergent(batch.listed, self.optim.listed_keep, direction)
            batch = dataclasses.replace(batch, listed=listed)
        if with_listed and rl_replies:
            batch, advantages = move_rl_to_replies(batch, advantages)
            if not self.one_update:  # the ratio's q_old: before the step's first update
                assert batch.listed is not None
                batch = dataclasses.replace(
                    batch, listed=dataclasses.replace(batch.listed, logq_old=self._listed_logq_old(batch.listed))
                )
        # with the listed turns' terms, a batch whose every token advantage is 0 has no token gradient to take
        token_pass = not with_listed or bool(advantages.any()) or batch.constraints is not None or token_kl is not None
        minis = self._mini_batches(batch, advantages.detach(), token_kl)
        listed_parts: list[dict[str, float]] = []
        loss_parts: list[dict[str, float]] = []
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for epoch in range(self.optim.epochs):
            loss_parts.clear()  # the last pass's
            for mini, mini_advantages, weights, mini_token_kl in minis:
                if token_pass:
                    sums = self._accumulate(
                        mini, mini_advantages, weights, mini_token_kl, from_update=self.on_policy_ratio
                    )
                else:
                    sums = {"actor/pg_loss": 0.0}
                loss_parts.append({**sums, "tokens": float(mini.loss_mask.sum())})
                if with_listed and mini.listed is not None and len(mini.listed):
                    measured = self._listed_backward(mini, weights, kl_weight, rl_replies)
                    if epoch == 0:  # each mini-batch's turns before their own update
                        listed_parts.append({**measured, "turns": float(len(mini.listed))})
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim.grad_clip)
                if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor over the ranks' shards
                    grad_norm = grad_norm.full_tensor()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        self._update_ema()
        tokens = float(batch.loss_mask.sum())
        metrics.update(weighted_mean(loss_parts, "tokens", summed=frozenset({PBR_CONSTRAINTS})))
        metrics.update(weighted_mean(listed_parts, "turns"))
        metrics.update(
            {
                "actor/grad_norm": float(grad_norm),
                "actor/lr": lr,
                "learner/tokens": float(batch.attention_mask.sum()),
                "learner/supervised_tokens": tokens,
                "learner/rows": float(batch.num_rows),
                "learner/step_s": time.perf_counter() - start,
                "learner/step": float(self.global_step),
            }
        )
        return metrics

    def _mini_batches(
        self, batch: TokenBatch, advantages: torch.Tensor, token_kl: torch.Tensor | None
    ) -> list[tuple[TokenBatch, torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """The batch cut into `optim.mini_batches` contiguous row ranges, each with its advantages and its tokens'
        weights on the forward KL over the teacher's top tokens (both computed on the whole batch), and its own loss
        weights; one optimizer update each."""
        count = min(self.optim.mini_batches, batch.num_rows)
        parts = [rank_rows(batch.num_rows, index, count) for index in range(count)]
        whole = [(batch, advantages, token_kl)]
        minis = whole if count == 1 else [(batch.rows(p), advantages[p], _rows(token_kl, p)) for p in parts]
        return [(mini, adv, batch_loss_weights(mini, self.reduction), kl) for mini, adv, kl in minis]

    def learning_rate(self) -> float:
        """The learning rate of this step's updates: `optim.lr`, risen linearly over `optim.warmup_steps`, then as
        `optim.lr_schedule` says over the run's `total_steps`."""
        factor = lr_factor(
            self.optim.lr_schedule,
            self.global_step,
            self.total_steps,
            warmup=self.optim.warmup_steps,
            final=self.optim.min_lr_ratio,
        )
        return self.optim.lr * factor

    def _listed_backward(
        self, mini: TokenBatch, weights: torch.Tensor, kl_weight: float, rl_replies: bool
    ) -> dict[str, float]:
        """Add the terms of `mini`'s turns drawn among listed replies to the gradients, from one forward of every
        listed reply (in chunks of `optim.micro_batch_tokens`): `kl_weight` x the mean over the turns of the KL of the
        student's choice from the teacher's (reverse, or forward with `reply_kl: forward`), each turn's times its own
        weight (`ListedTurns.weights`, ATOD's T-DUR; docs/design/042, 044, 046), and with `rl_replies` the reply-level
        RL term, each turn weighted as the reduction weighs its tokens (`weights`, docs/design/047); their metrics
        (`opd/listed_kl` is the reverse KL whichever is trained, unweighted)."""
        if self.sharded:
            raise ObjectiveError(
                "kl_over / rl_over: replies train on one learner rank (placement.learner_gpus <= 1)",
                reason="LISTED_SHARDED",
            )
        listed = mini.listed
        assert listed is not None
        sums: dict[str, float] = {}
        rl_weights = turn_means(weights, mini, listed.turn_ids) if rl_replies else None
        for part in listed.chunks(self.optim.micro_batch_tokens):
            with autocast(self.device, self.cpu_bf16):
                student = self._listed_logprobs(listed, part)
            loss = torch.zeros((), device=self.device)
            if kl_weight > 0:
                loss = loss + self._listed_kl(listed, part, student, kl_weight, sums)
            if rl_weights is not None:
                loss = loss + self._reply_rl(listed, part, student, rl_weights[part], sums)
            loss.backward()
            _add(sums, CHOICE_ENTROPY, choice_entropy(student))
        count = len(listed)
        measured = {CHOICE_ENTROPY: sums.pop(CHOICE_ENTROPY) / count}
        if kl_weight > 0:
            measured.update({name: sums.pop(name) / count for name in (LISTED_KL, LISTED_AGREE, LISTED_TURN_WEIGHT)})
            measured[LISTED_WEIGHT] = kl_weight
        if rl_weights is not None:
            drawn = max(sums.pop("drawn"), 1.0)
            measured[REPLY_PG_LOSS] = sums.pop(REPLY_PG_LOSS)
            measured.update({name: value / drawn for name, value in sums.items()})
        return measured

    def _listed_kl(
        self, listed: ListedTurns, part: slice, student: list[torch.Tensor], weight: float, sums: dict[str, float]
    ) -> torch.Tensor:
        """The chunk `part`'s share of the weighted mean KL over the listed turns; its metrics summed into `sums`."""
        direction = self.spec.reply_kl(self.hyperparameters)
        teacher = [torch.tensor(scores, device=self.device) for scores in listed.teacher_scores()[part]]
        pairs = list(zip(student, teacher, strict=True))
        kl = torch.stack([listed_kl(s, t, direction) for s, t in pairs])
        turn_weights = listed.turn_weights(part, kl.device)
        reverse = kl if direction == "reverse" else torch.stack([listed_kl(s.detach(), t) for s, t in pairs])
        _add(sums, LISTED_KL, float(reverse.detach().sum()))
        _add(sums, LISTED_AGREE, sum(int(s.argmax() == t.argmax()) for s, t in pairs))
        _add(sums, LISTED_TURN_WEIGHT, float(turn_weights.sum()))
        return weight * (turn_weights * kl).sum() / len(listed)

    def _reply_rl(
        self,
        listed: ListedTurns,
        part: slice,
        student: list[torch.Tensor],
        weights: torch.Tensor,
        sums: dict[str, float],
    ) -> torch.Tensor:
        """The chunk `part`'s reply-level RL loss (q_old: `listed.logq_old`, else this forward's own, detached); its
        metrics summed into `sums` (the means per drawn turn)."""
        assert listed.drawn is not None and listed.advantages is not None
        drawn = listed.drawn[part]
        logq = drawn_logq(student, drawn)
        old = logq.detach() if listed.logq_old is None else torch.tensor(listed.logq_old[part], device=logq.device)
        advantages = torch.tensor(listed.advantages[part], dtype=torch.float32, device=logq.device)
        loss, metrics = reply_policy_loss(logq, old, advantages, weights, drawn, self.objective.clip_eps)
        count = sum(index >= 0 for index in drawn)
        _add(sums, "drawn", count)
        _add(sums, REPLY_PG_LOSS, float(loss.detach()))
        for name, value in metrics.items():
            if name != REPLY_PG_LOSS:
                _add(sums, name, count * float(value))
        return loss

    def _listed_logprobs(self, listed: ListedTurns, part: slice) -> list[torch.Tensor]:
        """The student's total log-prob of each listed reply of the turns `part` (one forward; rows padded to a
        multiple of `optim.micro_batch_width_multiple`)."""
        multiple = self.optim.micro_batch_width_multiple
        return listed_reply_logprobs(self.model, listed.prompts[part], listed.replies[part], 0, multiple)

    @torch.no_grad()
    def _listed_logq_old(self, listed: ListedTurns) -> list[float]:
        """log q of each listed turn's drawn reply under the current parameters (the reply-level ratio's q_old)."""
        assert listed.drawn is not None
        values: list[float] = []
        for part in listed.chunks(self.optim.micro_batch_tokens):
            with autocast(self.device, self.cpu_bf16):
                student = self._listed_logprobs(listed, part)
            values += drawn_logq(student, listed.drawn[part]).tolist()
        return values

    @property
    def one_update(self) -> bool:
        """Whether a step makes one optimizer update (`optim.epochs` and `optim.mini_batches` 1)."""
        return self.optim.epochs == 1 and self.optim.mini_batches == 1

    @property
    def on_policy_ratio(self) -> bool:
        """Whether the PPO ratio's `logp_old` is the update forward's own log-prob, detached: the learner's numbers
        are wanted (`recompute_logp_old`), the step makes one update (`optim.epochs` and `optim.mini_batches` 1) and
        `logp_old_from_update` is on. At the parameters of that one update it equals a separate recompute."""
        return self.recompute_logp_old and self.logp_old_from_update and self.one_update

    @property
    def separate_recompute(self) -> bool:
        """Whether `step` runs `recompute_old_logprobs` (a forward of its own) before the advantages."""
        return self.recompute_logp_old and not self.on_policy_ratio

    @torch.no_grad()
    def recompute_old_logprobs(self, batch: TokenBatch) -> tuple[TokenBatch, dict[str, float]]:
        """`batch` with `logp_old` recomputed by the learner's current parameters (verl's default when
        the rollout engine differs from the learner: the first PPO ratio is then exactly 1), and
        `actor/rollout_logp_abs_diff`, the mean |rollout log-prob - recomputed| over supervised tokens."""
        logp_old = torch.zeros_like(batch.logp_old)
        for rows, width, real in self._schedule(batch):
            with autocast(self.device, self.cpu_bf16):
                logp, *_ = self.scorer(
                    batch.input_ids[rows, :width],
                    batch.attention_mask[rows, :width],
                    self._positions(batch, rows, width),
                )
            if real:
                logp_old[rows, :width] = logp.to(logp_old.dtype)
        all_reduce_sum(logp_old)  # each rank filled its own rows
        mask = batch.loss_mask
        logp_old = torch.where(mask, logp_old.clamp(max=0.0), torch.zeros_like(logp_old))
        diff = (logp_old - batch.logp_old)[mask].abs()
        metrics = {ROLLOUT_DIFF: float(diff.mean()) if diff.numel() else 0.0}
        return dataclasses.replace(batch, logp_old=logp_old), metrics

    def _accumulate(
        self,
        batch: TokenBatch,
        advantages: torch.Tensor,
        weights: torch.Tensor,
        token_kl: torch.Tensor | None = None,
        *,
        from_update: bool = False,
    ) -> dict[str, float]:
        """Forward and backward over this rank's micro-batches (gradients accumulate); the summed metrics.
        `token_kl`: each token's weight on the forward KL over the teacher's top tokens, added to the loss with the
        loss weights (`token_kl: forward`, docs/design/053). `from_update`: the ratio's `logp_old` is each forward's
        own (`on_policy_ratio`), and `actor/rollout_logp_abs_diff` compares it with the batch's recorded log-probs,
        as a recompute does."""
        weighted: dict[str, float] = {}
        entropy_sum = 0.0
        total = max(float(batch.loss_mask.sum()), 1.0)
        top = batch.teacher_top if token_kl is not None else None
        scored_total = max(float(top.scored.sum()), 1.0) if top is not None else 1.0
        constraints = batch.constraints if self.pbr is not None and self.pbr.weight > 0 else None
        for index, (rows, width, real) in enumerate(self._schedule(batch), start=1):
            ids, attn = batch.input_ids[rows, :width], batch.attention_mask[rows, :width]
            mask = batch.loss_mask[rows, :width]
            part_top = top.narrow(rows, width) if top is not None else None
            with autocast(self.device, self.cpu_bf16):
                logp, entropy, forward_kl = self.scorer(ids, attn, self._positions(batch, rows, width), part_top)
            recorded = batch.logp_old[rows, :width]
            logp_old = own_logp_old(logp, recorded.dtype) if from_update else recorded
            loss, loss_metrics = ppo_actor_loss(
                logp,
                logp_old,
                advantages[rows, :width],
                mask,
                clip_eps=self.objective.clip_eps,
                weights=weights[rows, :width] * float(real),
            )
            aux = loss.new_zeros(())
            if token_kl is not None and part_top is not None:
                aux = aux + (forward_kl * token_kl[rows, :width] * weights[rows, :width]).sum() * float(real)
                if real:
                    kl_sum = float(forward_kl.detach()[part_top.scored].sum())
                    weighted[TOKEN_FORWARD_KL] = weighted.get(TOKEN_FORWARD_KL, 0.0) + kl_sum / scored_total
            part = constraints.in_rows(rows) if constraints is not None and real else None
            if part is not None and part.count and constraints is not None:
                aux, info = self._pbr_term(ids, attn, part, constraints.count)
                weighted[PBR_LOSS] = weighted.get(PBR_LOSS, 0.0) + float(aux.detach())
                weighted[PBR_EVENT_PROB] = (
                    weighted.get(PBR_EVENT_PROB, 0.0) + info["event_prob_sum"] / constraints.count
                )
            # FSDP averages gradients over ranks; the weights are already global, so scale back up.
            ((loss + aux) * self.world_size).backward()
            self._trim_heap(index)
            if not real:
                continue
            entropy_sum += float(entropy[mask].sum())
            if from_update:
                diff_sum = float((logp_old - recorded)[mask].abs().sum())
                weighted[ROLLOUT_DIFF] = weighted.get(ROLLOUT_DIFF, 0.0) + diff_sum / total
            share = float(mask.sum()) / total
            for name, value in loss_metrics.items():
                if name != "actor/pg_loss":
                    weighted[name] = weighted.get(name, 0.0) + share * float(value)
            weighted["actor/pg_loss"] = weighted.get("actor/pg_loss", 0.0) + float(loss.detach())
        weighted["actor/entropy"] = entropy_sum / total
        if self.pbr is not None:
            weighted[PBR_CONSTRAINTS] = (
                float(batch.constraints.count if batch.constraints is not None else 0) / self.world_size
            )
            weighted.setdefault(PBR_LOSS, 0.0)
        return self._sum_over_ranks(weighted)

    def _positions(self, batch: TokenBatch, rows: slice, width: int) -> torch.Tensor | None:
        """Where the scorer projects to the vocabulary: the supervised tokens (None: everywhere)."""
        return batch.loss_mask[rows, :width] if self.supervised_positions else None

    def _pbr_term(
        self, ids: torch.Tensor, attn: torch.Tensor, part: ConstraintBatch, total: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The PBR term of this micro-batch's constraints: the rows carrying one are run again to read the
        full next-token distribution at each constrained slot (the scorer keeps only sampled-token log-probs)."""
        assert self.pbr is not None
        lm = self.scorer.lm
        used = torch.unique(part.rows)
        with autocast(self.device, self.cpu_bf16):
            hidden = lm.model(input_ids=ids[used], attention_mask=attn[used].long()).last_hidden_state
            slots = hidden[torch.searchsorted(used, part.rows), part.positions - 1]
            dist = torch.log_softmax(lm.lm_head(slots).float(), dim=-1)
        pbr = self.pbr
        return pbr_loss(dist, part, weight=pbr.weight, cap=pbr.cap, normaliser=total, cap_on=pbr.cap_on)

    def _schedule(self, batch: TokenBatch) -> list[tuple[slice, int, bool]]:
        """This rank's micro-batches (rows, width, real); padded with zero-weight repeats of a row
        to the largest count over ranks, since each forward and backward is a collective under FSDP."""
        own = rank_rows(batch.num_rows, self.rank, self.world_size)
        lengths = batch.attention_mask[own].sum(dim=1).tolist()
        columns = batch.input_ids.shape[1]
        multiple = self.optim.micro_batch_width_multiple
        plan = [
            (slice(own.start + r.start, own.start + r.stop), round_up(width, multiple, columns), True)
            for r, width in length_groups(lengths, self.optim.micro_batch_tokens)
        ]
        count = all_reduce_max(len(plan), self.device)
        filler = (slice(0, 1), int(batch.attention_mask[0].sum()), False)
        return plan + [filler] * (count - len(plan))

    def _sum_over_ranks(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each metric summed over ranks (each rank's value is its share of the global one)."""
        if self.world_size == 1:
            return metrics
        names = sorted(metrics)
        values = all_reduce_sum(torch.tensor([metrics[n] for n in names], dtype=torch.float64, device=self.device))
        return dict(zip(names, values.tolist(), strict=True))

    def weights(self) -> dict[str, torch.Tensor]:
        """CPU copy of the current parameters, named as in the HF state dict (for rollout workers).
        Sharded: a collective; rank 0 gets the full dict, the other ranks an empty one."""
        if not self.sharded:
            return {name: tensor.detach().to("cpu", copy=True) for name, tensor in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(self.scorer, options=options)
        return {name.removeprefix("lm."): tensor for name, tensor in full.items() if isinstance(tensor, torch.Tensor)}

    def save(self, folder: str | Path, tokenizer: Any = None) -> Path:
        """Write a checkpoint to `folder`: one rank writes an HF model folder plus optimizer, step and RNG
        states; several ranks write their shards (`sharded_checkpoint`; `load_model` assembles them). With
        `optim.ema_decay` the model folder holds the averaged weights and the state the trained ones."""
        out = Path(folder)
        if self.sharded:
            return self._save_sharded(out, tokenizer)
        out.mkdir(parents=True, exist_ok=True)
        trained = None if self.ema is None else {name: p.detach().clone() for name, p in self.model.named_parameters()}
        with self._average_in_model():
            self.model.save_pretrained(out)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        self._save_state(out, self.optimizer.state_dict(), trained)
        return out

    def evaluated_weights(self) -> dict[str, torch.Tensor]:
        """CPU copy of the weights a held-out evaluation plays: with `optim.ema_decay` the moving average (what a
        checkpoint's model holds), else the current parameters (`weights`)."""
        with self._average_in_model():
            return self.weights()

    @contextmanager
    def _average_in_model(self) -> Iterator[None]:
        """Inside the block the model holds the weights' moving average, the trained weights back after it (no
        change without `optim.ema_decay`)."""
        if self.ema is None:
            yield
            return
        trained = {name: p.detach().clone() for name, p in self.model.named_parameters()}
        self._copy_into_model(self.ema)
        try:
            yield
        finally:
            self._copy_into_model(trained)

    def _update_ema(self) -> None:
        """ema <- decay x ema + (1 - decay) x parameters (`optim.ema_decay`; nothing when off)."""
        if self.ema is None:
            return
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                self.ema[name].lerp_(p.detach().float(), 1.0 - self.optim.ema_decay)

    @torch.no_grad()
    def _copy_into_model(self, weights: Mapping[str, torch.Tensor]) -> None:
        for name, p in self.model.named_parameters():
            p.copy_(weights[name])

    def _save_sharded(self, out: Path, tokenizer: Any) -> Path:
        """torch.distributed.checkpoint: every rank writes its own model and optimizer shards to
        `out/SHARDED_DIR` (nothing gathered); rank 0 adds the model config, tokenizer, step and RNG."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.scorer, self.optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=out / SHARDED_DIR)
        if self.rank == 0:
            self.model.config.save_pretrained(out)
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
            self._save_state(out, None)
        torch.distributed.barrier()
        return out

    def _save_state(self, out: Path, optimizer: Any, trained: Mapping[str, torch.Tensor] | None = None) -> None:
        state = {
            "optimizer": optimizer,
            "trained_weights": trained,
            "global_step": self.global_step,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }
        torch.save(state, out / STATE_FILE)

    def load(self, folder: str | Path) -> None:
        """Restore what `save` wrote into this learner (one rank: the caller loaded the HF weights;
        sharded: each rank reads its model and optimizer shards, any rank count that saved them)."""
        folder = Path(folder)
        state = torch.load(folder / STATE_FILE, weights_only=False)
        if sharded_checkpoint(folder):
            if not self.sharded:
                raise ValueError(f"{folder} is a sharded checkpoint: resume it with placement.learner_gpus > 1")
            self._load_sharded(folder)
        elif self.sharded:
            raise ValueError(f"{folder} is a one-rank checkpoint: resume it with one learner rank")
        else:
            self.optimizer.load_state_dict(state["optimizer"])
            self._load_average(state.get("trained_weights"))
        self.global_step = int(state["global_step"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])

    def _load_average(self, trained: Mapping[str, torch.Tensor] | None) -> None:
        """After `load`'s caller read the model folder: with `optim.ema_decay`, those weights are the average and
        `trained` (the state's) the weights training continues from; a checkpoint without an average starts one."""
        if self.ema is None:
            if trained is not None:
                raise ValueError("this checkpoint's model is a weight average (optim.ema_decay): resume it with one")
            return
        self.ema = {name: p.detach().float().clone() for name, p in self.model.named_parameters()}
        if trained is not None:
            self._copy_into_model(trained)

    def _load_sharded(self, folder: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optimizer_state = get_state_dict(self.scorer, self.optimizer)
        # dcp.load fills these dicts in place, each rank its own shards
        dcp.load({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder / SHARDED_DIR)
        set_state_dict(self.scorer, self.optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)


def sharded_checkpoint(folder: str | Path) -> bool:
    """Whether `folder` holds a multi-rank (DCP) checkpoint rather than an HF model folder."""
    return (Path(folder) / SHARDED_DIR).is_dir()


def apply_weights(model: Any, weights: Mapping[str, torch.Tensor]) -> None:
    """Load `weights` into `model` in place (strict)."""
    model.load_state_dict(dict(weights), strict=True)


def _add(sums: dict[str, float], name: str, value: float) -> None:
    """`sums[name] += value` (from 0)."""
    sums[name] = sums.get(name, 0.0) + value
