"""The reply-level RL term (`rl_over: replies`, docs/design/047) on tiny Qwen3s: a turn drawn among listed replies
reaches the batch with the reply it drew, even without a teacher; its RL advantage moves off its tokens to PPO's term
on q(a), the drawn reply's probability normalised over its list; the learner's gradient is A x grad log q(a) from
plain forwards; a negative advantage lowers q(a) without draining the list's mass as the token term does; a
multi-update step clips on the pre-step q_old; the config refuses it where it cannot run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from trainer.batching import SyncGroups
from trainer.config import ObjectiveConfig, OptimConfig
from trainer.errors import ObjectiveError
from trainer.learner import CHOICE_ENTROPY, REPLY_PG_LOSS, Learner, batch_loss_weights
from trainer.models.loading import load_model, load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.objectives.batch import TokenBatch
from trainer.objectives.listed import ListedTurns
from trainer.objectives.registry import build_config, get_objective
from trainer.objectives.reply_rl import move_rl_to_replies, turn_means
from trainer.rollout.types import Trajectory


@pytest.fixture(scope="module")
def batch(tiny_models: TinyModels, listed_trajectories: list[Trajectory]) -> TokenBatch:
    """The listed trajectories as GRPO sees them: no teacher."""
    return SyncGroups(pad_id=load_tokenizer(tiny_models.student).pad_token_id).compose(listed_trajectories)


def _learner(path: Path, *, lr: float = 3e-2, mini_batches: int = 1, **params: object) -> Learner:
    torch.manual_seed(0)
    return Learner(
        load_model(path),
        ObjectiveConfig(name="grpo", params={"rl_over": "replies", **params}),
        OptimConfig(lr=lr, micro_batch_tokens=64, mini_batches=mini_batches),
    )


def _reply_logp(model: torch.nn.Module, listed: ListedTurns) -> list[torch.Tensor]:
    """Each turn's total log-prob of each listed reply, from plain forwards of prompt + reply."""
    out = []
    for prompt, replies in zip(listed.prompts, listed.replies, strict=True):
        totals = []
        for reply in replies:
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + reply])).logits[0, :-1].float(), dim=-1)
            totals.append(logp[len(prompt) - 1 :].gather(-1, torch.tensor(reply)[:, None]).sum())
        out.append(torch.stack(totals))
    return out


def test_listed_turns_record_the_reply_they_drew_without_a_teacher(batch: TokenBatch) -> None:
    listed = batch.listed
    assert listed is not None and len(listed) == 12 and listed.logp_teacher is None
    assert listed.drawn is not None and min(listed.drawn) >= 0
    for turn_id, replies, drawn in zip(listed.turn_ids, listed.replies, listed.drawn, strict=True):
        (row,) = torch.nonzero((batch.turn_ids == turn_id).any(dim=1)).flatten().tolist()
        assert batch.input_ids[row][batch.turn_ids[row] == turn_id].tolist() == replies[drawn]


def test_the_rl_advantage_moves_off_the_listed_turns_tokens(batch: TokenBatch) -> None:
    advantages, _ = get_objective("grpo").compute(batch, build_config("grpo", {"rl_over": "replies"}), step=0)
    moved, kept = move_rl_to_replies(batch, advantages)
    assert moved.listed is not None and moved.listed.advantages is not None
    on_listed = torch.isin(batch.turn_ids, torch.tensor(moved.listed.turn_ids)) & batch.loss_mask
    assert not bool(kept[on_listed].any())
    free = batch.loss_mask & ~on_listed
    assert bool(free.any()) and torch.equal(kept[free], advantages[free])
    for turn, value in zip(moved.listed.turn_ids, moved.listed.advantages, strict=True):
        on_turn = advantages[(batch.turn_ids == turn) & batch.loss_mask]
        assert on_turn.tolist() == pytest.approx([value] * on_turn.numel())
    assert {round(v, 4) for v in moved.listed.advantages} >= {round(float(a), 4) for a in advantages[on_listed][:1]}
    assert min(moved.listed.advantages) < 0 < max(moved.listed.advantages)


def test_the_gradient_is_the_advantage_times_grad_log_q(tiny_models: TinyModels, batch: TokenBatch) -> None:
    learner = _learner(tiny_models.student)
    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=0)
    weights = batch_loss_weights(batch, learner.reduction)
    moved, _ = move_rl_to_replies(batch, advantages)
    assert moved.listed is not None and moved.listed.advantages is not None and moved.listed.drawn is not None
    assert len(list(moved.listed.chunks(64))) > 3  # several chunks
    metrics = learner._listed_backward(moved, weights, kl_weight=0.0, rl_replies=True)
    got = [p.grad.clone() for p in learner.model.parameters()]
    learner.model.zero_grad(set_to_none=True)
    per_turn = turn_means(weights, batch, moved.listed.turn_ids)
    logq = [torch.log_softmax(t, 0) for t in _reply_logp(learner.model, moved.listed)]
    drawn = torch.stack([q[d] for q, d in zip(logq, moved.listed.drawn, strict=True)])
    reference = -(per_turn.float() * torch.tensor(moved.listed.advantages) * drawn).sum()
    reference.backward()
    for a, p in zip(got, learner.model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-3)
    assert metrics["actor/reply_ratio_mean"] == pytest.approx(1.0) and metrics["actor/reply_clipfrac"] == 0.0
    surrogate = -(per_turn * torch.tensor(moved.listed.advantages, dtype=torch.float64)).sum()  # -sum w A r at r = 1
    assert metrics[REPLY_PG_LOSS] == pytest.approx(float(surrogate), rel=1e-4)
    entropy = sum(float(-(q.exp() * q).sum().detach()) for q in logq) / len(logq)
    assert metrics[CHOICE_ENTROPY] == pytest.approx(entropy, rel=1e-4)


def _all_failed(tiny_models: TinyModels, trajectories: list[Trajectory]) -> TokenBatch:
    """The trajectories all failed, each group beside one winner whose turns are masked (it sets the group's mean
    and trains nothing): every listed turn's advantage is negative."""
    trajs = copy.deepcopy(trajectories)
    for t in trajs:
        t.won = False
    winners = [copy.deepcopy(trajs[group]) for group in (0, 1)]
    for t in winners:
        t.won = True
        for turn in t.turns:
            turn.masked = True
    return SyncGroups(pad_id=load_tokenizer(tiny_models.student).pad_token_id).compose(trajs + winners)


def _choice_and_mass(model: torch.nn.Module, listed: ListedTurns) -> tuple[float, float]:
    """The mean over the turns of log q of the drawn reply and of log of the list's total probability."""
    assert listed.drawn is not None
    with torch.no_grad():
        totals = [torch.logsumexp(q, 0) for q in _reply_logp(model, listed)]
        logq = [torch.log_softmax(q, 0)[d] for q, d in zip(_reply_logp(model, listed), listed.drawn, strict=True)]
    return float(torch.stack(logq).mean()), float(torch.stack(totals).mean())


def test_a_negative_advantage_moves_the_choice_and_keeps_the_list(
    tiny_models: TinyModels, listed_trajectories: list[Trajectory]
) -> None:
    """Every listed turn failed: under the reply term q(a) falls and the list keeps its probability; the token term
    lowers P(a) by draining the whole list's probability to replies never drawn (the collapse of note 046)."""
    batch = _all_failed(tiny_models, listed_trajectories)
    assert batch.listed is not None
    moved = {}
    for rl_over in ("replies", "tokens"):
        learner = _learner(tiny_models.student, lr=3e-3, rl_over=rl_over)
        q0, mass0 = _choice_and_mass(learner.model, batch.listed)
        for _ in range(3):
            learner.step(batch)
        q1, mass1 = _choice_and_mass(learner.model, batch.listed)
        moved[rl_over] = (q1 - q0, mass1 - mass0)
    assert moved["replies"][0] < min(-0.05, moved["tokens"][0])  # measured: -0.99 against -0.15 nats
    assert moved["tokens"][1] < -0.5 and abs(moved["replies"][1]) < 0.25 * abs(moved["tokens"][1])  # -2.2, +0.3


def test_a_multi_update_step_clips_on_the_pre_step_choice(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """One update: the ratio is 1 (q_old is the update's own forward). Two mini-batches: the second's turns are
    measured after the first's update, against q_old from before the step."""
    one = _learner(tiny_models.student).step(batch)
    assert one["actor/reply_ratio_mean"] == pytest.approx(1.0) and one["actor/reply_approx_kl"] == 0.0
    two = _learner(tiny_models.student, mini_batches=2).step(batch)
    assert two["actor/reply_approx_kl"] > 1e-6


def test_where_it_cannot_run_it_is_refused(alfworld_config: object) -> None:
    with pytest.raises(ObjectiveError, match="rl_over must be one of"):
        build_config("grpo", {"rl_over": "reply"})
    with pytest.raises(ObjectiveError, match="set kl_over: replies too"):
        build_config("atod", {"rl_over": "replies"})
    build_config("atod", {"rl_over": "replies", "kl_over": "replies"})
    with pytest.raises(ValueError, match=r"rl_over: replies .* set rollout\.action_match: choice"):
        alfworld_config("localhost:1", objective={"name": "grpo", "params": {"rl_over": "replies"}})  # type: ignore[operator]
