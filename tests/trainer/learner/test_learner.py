"""Learner: exact gradient accumulation, entropy diagnostic, checkpoint/resume, on a tiny Qwen3."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from trainer.backends.base import SamplingSettings
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.config import ObjectiveConfig, OptimConfig
from trainer.learner import Learner, batch_loss_weights, micro_batches, round_up, token_logprobs
from trainer.memory import trim_heap
from trainer.models.loading import load_model, load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.objectives.batch import TokenBatch
from trainer.rollout.types import Trajectory


@pytest.fixture(scope="module")
def batch(tiny_models: TinyModels, student_trajectories: Callable[..., list[Trajectory]]) -> TokenBatch:
    """8 trajectories (2 groups x 4) of 2 turns each, sampled from the tiny student, teacher-scored."""
    trajs = student_trajectories(
        8, 2, lambda i, k: SamplingSettings(max_new_tokens=6 + i, temperature=1.0, seed=100 * i + k)
    )
    attach_teacher_logprobs(trajs, HFBackend.from_pretrained(tiny_models.teacher))
    return SyncGroups(pad_id=load_tokenizer(tiny_models.student).pad_token_id).compose(trajs)


def _learner(path: Path, objective: str, budget: int, reduction: str | None = None) -> Learner:
    torch.manual_seed(0)
    return Learner(
        load_model(path),
        ObjectiveConfig(name=objective, reduction=reduction),
        OptimConfig(lr=1e-2, micro_batch_tokens=budget),
    )


def test_rollout_logprobs_match_the_learners_recomputation(tiny_models: TinyModels, batch: TokenBatch) -> None:
    model = load_model(tiny_models.student)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    assert torch.allclose(logp[batch.loss_mask], batch.logp_old[batch.loss_mask], atol=1e-4)


@pytest.mark.parametrize(
    ("objective", "reduction"),
    [("grpo", None), ("opd", None), ("atod", None), ("atod", "turn-mean-token-mean"), ("grpo", "seq-mean-token-sum")],
)
def test_micro_batching_gives_the_full_batch_gradient(
    tiny_models: TinyModels, batch: TokenBatch, objective: str, reduction: str | None
) -> None:
    slices = [rows for rows, _ in micro_batches(batch, 64)]
    assert len(slices) > 3
    # Some trajectory's turn rows fall into different micro-batches (they share one normaliser).
    assert any(int(batch.traj_ids[rows][-1]) == int(batch.traj_ids[rows.stop]) for rows in slices[:-1])
    whole = _learner(tiny_models.student, objective, budget=1 << 20, reduction=reduction)
    split = _learner(tiny_models.student, objective, budget=64, reduction=reduction)
    advantages, _ = whole.spec.compute(batch, whole.hyperparameters, step=0)
    weights = batch_loss_weights(batch, whole.reduction)
    m_whole = whole._accumulate(batch, advantages, weights)
    m_split = split._accumulate(batch, advantages, weights)
    assert m_whole["actor/pg_loss"] == pytest.approx(m_split["actor/pg_loss"], rel=1e-4, abs=1e-6)
    assert m_whole["actor/entropy"] == pytest.approx(m_split["actor/entropy"], rel=1e-4)
    assert m_whole["actor/entropy"] > 0
    pairs = zip(whole.model.named_parameters(), split.model.parameters(), strict=True)
    grads = [(n, p.grad, q.grad) for (n, p), q in pairs]
    assert any(float(a.abs().max()) > 0 for _, a, _ in grads)
    for name, a, b in grads:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), name


def test_rounded_micro_batch_widths_give_the_same_gradient(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """`optim.micro_batch_width_multiple` pads each micro-batch to a multiple of its tokens (masked columns):
    the widths change, the gradient does not (docs/design/039)."""
    exact = _learner(tiny_models.student, "atod", budget=64)
    rounded = _learner(tiny_models.student, "atod", budget=64)
    rounded.optim = rounded.optim.model_copy(update={"micro_batch_width_multiple": 16})
    widths = [width for _, width, _ in exact._schedule(batch)]
    padded = [width for _, width, _ in rounded._schedule(batch)]
    columns = batch.input_ids.shape[1]
    assert padded != widths and all(p % 16 == 0 or p == columns for p in padded)
    assert all(w <= p <= max(columns, w) for w, p in zip(widths, padded, strict=True))
    advantages, _ = exact.spec.compute(batch, exact.hyperparameters, step=0)
    weights = batch_loss_weights(batch, exact.reduction)
    m_exact = exact._accumulate(batch, advantages, weights)
    m_rounded = rounded._accumulate(batch, advantages, weights)
    assert m_exact["actor/pg_loss"] == pytest.approx(m_rounded["actor/pg_loss"], rel=1e-5, abs=1e-7)
    for (name, a), b in zip(exact.model.named_parameters(), rounded.model.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7), name


def test_trimming_the_heap_leaves_the_update_unchanged(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """`optim.trim_heap_every` returns free heap pages between micro-batches (glibc here): the weights after an update
    are the same as without it (docs/design/039)."""
    assert trim_heap()
    plain = _learner(tiny_models.student, "atod", budget=64)
    trimmed = _learner(tiny_models.student, "atod", budget=64)
    trimmed.optim = trimmed.optim.model_copy(update={"trim_heap_every": 1})
    plain.step(batch)
    trimmed.step(batch)
    for (name, a), b in zip(plain.model.named_parameters(), trimmed.model.parameters(), strict=True):
        assert torch.equal(a, b), name


def test_round_up_stays_within_the_batch() -> None:
    assert [round_up(w, 64, 300) for w in (1, 64, 65, 250, 299, 300)] == [64, 64, 128, 256, 300, 300]
    assert round_up(17, 1, 300) == 17 and round_up(310, 64, 300) == 310


def test_step_updates_the_weights(tiny_models: TinyModels, batch: TokenBatch) -> None:
    learner = _learner(tiny_models.student, "grpo", budget=4096)
    before = [p.detach().clone() for p in learner.model.parameters()]
    metrics = learner.step(batch)
    assert metrics["learner/step"] == 1.0 and metrics["actor/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters(), strict=True))


def test_frozen_embeddings_keep_their_values_and_hold_no_optimizer_state(
    tiny_models: TinyModels, batch: TokenBatch
) -> None:
    """`optim.train_embeddings` False: a step moves every weight but the (tied) embedding table, which has no
    gradient and no AdamW moments; the other weights' state is as with every parameter trained."""
    torch.manual_seed(0)
    learner = Learner(
        load_model(tiny_models.student), ObjectiveConfig(name="grpo"), OptimConfig(lr=1e-2, train_embeddings=False)
    )
    table = learner.model.get_input_embeddings().weight
    before = {name: p.detach().clone() for name, p in learner.model.named_parameters()}
    learner.step(batch)
    for name, p in learner.model.named_parameters():
        assert torch.equal(p, before[name]) == (p is table), name
    assert table.grad is None and table not in learner.optimizer.state
    trained = _learner(tiny_models.student, "grpo", budget=4096)
    trained.step(batch)
    assert len(learner.optimizer.state) == len(trained.optimizer.state) - 1


def test_atod_step_logs_schedule_and_tdur(tiny_models: TinyModels, batch: TokenBatch) -> None:
    metrics = _learner(tiny_models.student, "atod", budget=4096).step(batch)
    for key in ("hybrid/kl_coef", "hybrid/rl_coef", "tdur/active_ratio", "tdur/mean_weight", "tdur/gap_mean"):
        assert key in metrics
    assert metrics["hybrid/kl_coef"] == 1.0 and metrics["hybrid/rl_coef"] == pytest.approx(0.1)


def test_checkpoint_resume_continues_the_step_count(tmp_path: Path, tiny_models: TinyModels, batch: TokenBatch) -> None:
    first = _learner(tiny_models.student, "grpo", budget=4096)
    first.step(batch)
    first.step(batch)
    folder = first.save(tmp_path / "ckpt")
    resumed = Learner(load_model(folder), ObjectiveConfig(name="grpo"), OptimConfig(lr=1e-2))
    resumed.load(folder)
    assert resumed.global_step == 2
    state_a, state_b = first.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert torch.equal(state_a[0]["exp_avg"], state_b[0]["exp_avg"])
    first.step(batch)
    resumed.step(batch)
    for a, b in zip(first.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_a_weight_average_is_the_checkpoints_model_and_a_resume_trains_on(
    tmp_path: Path, tiny_models: TinyModels, batch: TokenBatch
) -> None:
    """`optim.ema_decay`: after each step ema = d x ema + (1 - d) x weights; the checkpoint's model folder and the
    evaluations' weights are the average, its state the trained weights; a resume continues exactly; without the
    option it is refused."""
    optim = OptimConfig(lr=1e-2, ema_decay=0.5)
    torch.manual_seed(0)
    first = Learner(load_model(tiny_models.student), ObjectiveConfig(name="grpo"), optim)
    start = {name: p.detach().clone() for name, p in first.model.named_parameters()}
    first.step(batch)
    after_one = {name: p.detach().clone() for name, p in first.model.named_parameters()}
    first.step(batch)
    assert first.ema is not None
    for name, p in first.model.named_parameters():
        expected = 0.5 * (0.5 * start[name] + 0.5 * after_one[name]) + 0.5 * p.detach()
        torch.testing.assert_close(first.ema[name], expected)
        assert not torch.equal(first.ema[name], p.detach())
    trained = {name: p.detach().clone() for name, p in first.model.named_parameters()}
    folder = first.save(tmp_path / "ckpt")
    saved = dict(load_model(folder).named_parameters())
    evaluated = first.evaluated_weights()  # what held-out evaluations play: the average too
    for name, p in first.model.named_parameters():
        torch.testing.assert_close(saved[name].detach(), first.ema[name])
        torch.testing.assert_close(evaluated[name], first.ema[name])
        assert torch.equal(p.detach(), trained[name])  # saving and reading the average left the trained weights
    resumed = Learner(load_model(folder), ObjectiveConfig(name="grpo"), optim)
    resumed.load(folder)
    first.step(batch)
    resumed.step(batch)
    for (name, a), b in zip(first.model.named_parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
        torch.testing.assert_close(first.ema[name], resumed.ema[name], atol=1e-6, rtol=0)  # type: ignore[index]
    plain = Learner(load_model(folder), ObjectiveConfig(name="grpo"), OptimConfig(lr=1e-2))
    with pytest.raises(ValueError, match="weight average"):
        plain.load(folder)


def test_recomputed_logp_old_makes_the_first_ratio_one(tiny_models: TinyModels, batch: TokenBatch) -> None:
    # A rollout engine in bf16 records slightly different log-probs than the learner computes.
    engine = dataclasses.replace(batch, logp_old=batch.logp_old.bfloat16().float().clamp(max=0.0))
    plain = _learner(tiny_models.student, "opd", budget=4096)
    assert abs(plain.step(engine)["actor/ratio_mean"] - 1.0) > 1e-4
    learner = _learner(tiny_models.student, "opd", budget=4096)
    learner.recompute_logp_old, learner.logp_old_from_update = True, False
    fixed, metrics = learner.recompute_old_logprobs(engine)
    assert metrics["actor/rollout_logp_abs_diff"] > 0
    torch.testing.assert_close(fixed.logp_old[batch.loss_mask], batch.logp_old[batch.loss_mask], atol=1e-4, rtol=0)
    step = learner.step(engine)
    assert step["actor/ratio_mean"] == pytest.approx(1.0, abs=1e-6) and step["actor/clipfrac"] == 0.0
    assert step["actor/rollout_logp_abs_diff"] == metrics["actor/rollout_logp_abs_diff"]


def test_supervised_positions_step_equals_the_every_position_step(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """fp32: one ATOD step (with the logp_old recompute) projecting only at supervised tokens gives the metrics and
    weights of the path that projects everywhere: metrics within 1e-5, the weight update within 1e-3 of its norm
    (docs/design/029). Not element by element: AdamW divides each element's gradient by its own magnitude, so an
    element whose gradient is near zero moves by a visible share of lr (1e-2 here) on summation order alone (up to
    2e-4 on 1 of 4,096 elements with 2 threads)."""
    results = []
    for supervised in (True, False):
        learner = _learner(tiny_models.student, "atod", budget=64)
        learner.recompute_logp_old, learner.supervised_positions = True, supervised
        learner.logp_old_from_update = False
        before = torch.cat([p.detach().flatten() for p in learner.model.parameters()])
        metrics = learner.step(batch)
        results.append((metrics, torch.cat([p.detach().flatten() for p in learner.model.parameters()]) - before))
    (got, got_update), (want, want_update) = results
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/rollout_logp_abs_diff"):
        assert got[key] == pytest.approx(want[key], abs=1e-5), key
    assert torch.linalg.norm(got_update - want_update) <= 1e-3 * torch.linalg.norm(want_update)


def _step_and_update(learner: Learner, batch: TokenBatch) -> tuple[dict[str, float], torch.Tensor]:
    before = torch.cat([p.detach().flatten() for p in learner.model.parameters()])
    metrics = learner.step(batch)
    return metrics, torch.cat([p.detach().flatten() for p in learner.model.parameters()]) - before


@pytest.mark.parametrize("objective", ["grpo", "atod"])
def test_on_policy_step_equals_the_recompute_step(tiny_models: TinyModels, batch: TokenBatch, objective: str) -> None:
    """fp32, one update per step: taking the ratio's logp_old from the update's own forward (no recompute forward)
    gives the metrics and weight update of the separate recompute (docs/design/033). GRPO from a rollout whose
    numbers differ (bf16-rounded): its advantages do not read logp_old, so nothing else may differ. ATOD's
    advantages read the rollout's log-probs on the fast path: here the rollout recorded the learner's own numbers
    (an fp32 engine), so the recompute reproduces them. Micro-batches of 64 tokens split trajectories."""
    reference = _learner(tiny_models.student, objective, budget=64)
    reference.recompute_logp_old = True
    if objective == "grpo":
        rollout = dataclasses.replace(batch, logp_old=batch.logp_old.bfloat16().float().clamp(max=0.0))
    else:
        rollout, _ = reference.recompute_old_logprobs(batch)
    results = []
    for from_update in (True, False):
        learner = _learner(tiny_models.student, objective, budget=64)
        learner.recompute_logp_old, learner.logp_old_from_update = True, from_update
        assert learner.separate_recompute is not from_update
        results.append(_step_and_update(learner, rollout))
    (got, got_update), (want, want_update) = results
    assert got["actor/ratio_mean"] == 1.0 and got["actor/clipfrac"] == 0.0
    assert got["actor/rollout_logp_abs_diff"] > (1e-4 if objective == "grpo" else -1.0)
    for key in sorted(want):
        if key != "learner/step_s":
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
    assert set(got) == set(want)
    assert torch.linalg.norm(got_update - want_update) <= 1e-4 * torch.linalg.norm(want_update)


def test_logp_old_comes_from_the_update_only_with_one_update_per_step(tiny_models: TinyModels) -> None:
    model = load_model(tiny_models.student)
    for epochs, recompute, from_update, on_policy in [
        (1, True, True, True),
        (2, True, True, False),  # the second update's ratio needs the first one's parameters: recompute
        ((1, 2), True, True, False),  # so does a second mini-batch's
        (1, True, False, False),
        (1, False, True, False),  # the rollout's numbers are the learner's: nothing recomputed
    ]:
        passes, minis = epochs if isinstance(epochs, tuple) else (epochs, 1)
        optim = OptimConfig(epochs=passes, mini_batches=minis, logp_old_from_update=from_update)
        learner = Learner(model, ObjectiveConfig(name="grpo"), optim, recompute_logp_old=recompute)
        assert learner.on_policy_ratio is on_policy
        assert learner.separate_recompute is (recompute and not on_policy)


def test_recompute_defaults_to_on_only_for_another_engine() -> None:
    assert OptimConfig().recompute("vllm") and not OptimConfig().recompute("hf")
    assert OptimConfig(recompute_logp_old=True).recompute("hf")
    assert not OptimConfig(recompute_logp_old=False).recompute("vllm")


@pytest.mark.parametrize("on_policy", [False, True])
def test_turn_gradients_average_to_the_update_gradient_and_the_audit_changes_nothing(
    tiny_models: TinyModels, batch: TokenBatch, on_policy: bool
) -> None:
    """`on_policy`: a bf16-rounded rollout whose logp_old the learner replaces with its update's own (the audit's
    ratio must be the update's, 1, for the turn gradients to average to the update's gradient)."""
    from trainer.gradient_audit import COSINE, DROPPED_GRAD_NORM_SHARE, PROJECTION, audit, turn_gradients

    learner = _learner(tiny_models.student, "opd", budget=1 << 20, reduction="turn-mean-token-mean")
    if on_policy:
        batch = dataclasses.replace(batch, logp_old=batch.logp_old.bfloat16().float().clamp(max=0.0))
        learner.recompute_logp_old = True
        assert learner.on_policy_ratio
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    rng = torch.get_rng_state()
    rows = batch.num_rows
    selected = [row % 3 == 0 for row in range(rows)]
    counted = [row < rows // 2 for row in range(rows)]
    metrics = audit(learner, batch, selected, counted)
    assert all(p.grad is None for p in learner.model.parameters())  # nothing accumulated, nothing stepped
    assert all(torch.equal(p, before[n]) for n, p in learner.model.named_parameters())
    assert torch.equal(torch.get_rng_state(), rng) and not learner.optimizer.state

    gradients = [g.double() for g in turn_gradients(learner, batch)]
    pool = torch.stack(gradients).mean(dim=0)
    chosen = torch.stack([g for g, s in zip(gradients, selected, strict=True) if s]).mean(dim=0)
    assert metrics[PROJECTION] == pytest.approx(float(pool @ chosen / (pool @ pool)), rel=1e-6)
    assert metrics[COSINE] == pytest.approx(float(pool @ chosen / (pool.norm() * chosen.norm())), rel=1e-6)
    norms = [float(g.norm()) for g in gradients]
    dropped = sum(n for n, s, c in zip(norms, selected, counted, strict=True) if c and not s)
    assert metrics[DROPPED_GRAD_NORM_SHARE] == pytest.approx(dropped / sum(norms[: rows // 2]), rel=1e-6)

    # G over every turn is the update's own gradient (turn-mean-token-mean, before clipping)
    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=0)
    learner._accumulate(batch, advantages, batch_loss_weights(batch, learner.reduction), from_update=on_policy)
    update = torch.cat([p.grad.reshape(-1) for p in learner.model.parameters() if p.grad is not None]).double()
    assert torch.allclose(pool, update, rtol=1e-4, atol=1e-7)
    assert audit(learner, batch, [True] * rows, [True] * rows)[PROJECTION] == pytest.approx(1.0)


def test_the_learning_rate_warms_up_linearly(tiny_models: TinyModels, batch: TokenBatch) -> None:
    torch.manual_seed(0)
    learner = Learner(
        load_model(tiny_models.student), ObjectiveConfig(name="opd"), OptimConfig(lr=1e-3, warmup_steps=4)
    )
    rates = [learner.step(batch)["actor/lr"] for _ in range(5)]
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_the_cosine_schedule_falls_to_its_floor_at_the_last_step(tiny_models: TinyModels, batch: TokenBatch) -> None:
    torch.manual_seed(0)
    optim = OptimConfig(lr=1e-3, warmup_steps=2, lr_schedule="cosine", min_lr_ratio=0.1)
    learner = Learner(load_model(tiny_models.student), ObjectiveConfig(name="opd"), optim, total_steps=6)
    rates = [learner.step(batch)["actor/lr"] for _ in range(6)]
    # warm-up 2, then a half cosine over the 4 updates left: 1, (1 + cos(pi / 3)) / 2, (1 + cos(2 pi / 3)) / 2, 0
    cosine = [1.0, 0.75, 0.25, 0.0]
    assert rates == pytest.approx([5e-4, 1e-3, *(1e-4 + 9e-4 * c for c in cosine)])
    with pytest.raises(ValueError, match="total steps"):
        Learner(load_model(tiny_models.student), ObjectiveConfig(name="opd"), optim)


def test_mini_batches_update_as_steps_on_each_part_would(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """OPD's token advantages are each token's own: a step of two mini-batches = a step on each half in turn."""
    torch.manual_seed(0)
    mini = Learner(load_model(tiny_models.student), ObjectiveConfig(name="opd"), OptimConfig(lr=1e-2, mini_batches=2))
    torch.manual_seed(0)
    steps = Learner(load_model(tiny_models.student), ObjectiveConfig(name="opd"), OptimConfig(lr=1e-2))
    half = batch.num_rows // 2
    metrics = mini.step(batch)
    parts = [batch.rows(part) for part in (slice(0, half), slice(half, batch.num_rows))]
    losses = [steps.step(part)["actor/pg_loss"] for part in parts]
    tokens = [float(part.loss_mask.sum()) for part in parts]
    # the step's loss metric: the parts' losses averaged by their supervised tokens
    want_loss = sum(loss * count for loss, count in zip(losses, tokens, strict=True)) / sum(tokens)
    assert metrics["actor/pg_loss"] == pytest.approx(want_loss, rel=1e-5)
    for got, want in zip(mini.model.parameters(), steps.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    changed = Learner(load_model(tiny_models.student), ObjectiveConfig(name="opd"), OptimConfig(lr=1e-2))
    changed.step(batch)  # one update on the whole batch moves the weights elsewhere
    pairs = zip(changed.model.parameters(), mini.model.parameters(), strict=True)
    assert any(not torch.allclose(a, b) for a, b in pairs)


def test_a_row_range_keeps_its_own_turns_and_constraints(batch: TokenBatch) -> None:
    part = batch.rows(slice(4, 9))
    assert part.num_rows == 5 and part.num_trajectories == batch.num_trajectories
    torch.testing.assert_close(part.input_ids, batch.input_ids[4:9])
    assert set(part.turn_ids[part.loss_mask].tolist()) == set(batch.turn_ids[4:9][batch.loss_mask[4:9]].tolist())
