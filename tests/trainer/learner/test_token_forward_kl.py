"""The forward KL over the teacher's top tokens on free-text turns (`token_kl: forward`, docs/design/053), on tiny
Qwen3s: the teacher's top tokens reach the batch as a plain forward gives them, the learner's chunked gradient is that
of the KL computed from plain forwards, its logit gradient is p_S - q, a few updates bring it down, the token signal
leaves the advantages, and the config refuses what it cannot run."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import pytest
import torch

from trainer.backends.base import SamplingSettings
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups, attach_teacher_logprobs
from trainer.config import ObjectiveConfig, OptimConfig
from trainer.errors import ObjectiveError
from trainer.learner import TOKEN_FORWARD_KL, Learner, batch_loss_weights, token_logprobs
from trainer.models.loading import load_model, load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.objectives.atod import atod_coefficients
from trainer.objectives.batch import TokenBatch
from trainer.objectives.registry import build_config, get_objective
from trainer.objectives.tdur import compute_tdur_weights
from trainer.objectives.teacher_top import forward_kl_over_top
from trainer.rollout.types import Trajectory

TOP_K = 5


@pytest.fixture(scope="module")
def scored(tiny_models: TinyModels, student_trajectories: Callable[..., list[Trajectory]]) -> list[Trajectory]:
    """6 trajectories (2 groups x 3) of 2 free-text turns by the tiny student, scored by the teacher with its top
    tokens."""
    trajs = student_trajectories(
        6, 2, lambda i, k: SamplingSettings(max_new_tokens=5 + i, temperature=1.0, seed=50 * i + k)
    )
    attach_teacher_logprobs(trajs, HFBackend.from_pretrained(tiny_models.teacher), top_k=TOP_K)
    return trajs


@pytest.fixture(scope="module")
def batch(tiny_models: TinyModels, scored: list[Trajectory]) -> TokenBatch:
    return SyncGroups(pad_id=load_tokenizer(tiny_models.student).pad_token_id).compose(copy.deepcopy(scored))


def _learner(tiny_models: TinyModels, objective: str, budget: int, **params: object) -> Learner:
    torch.manual_seed(0)
    return Learner(
        load_model(tiny_models.student),
        ObjectiveConfig(name=objective, params={"token_kl": "forward", "teacher_top_k": TOP_K, **params}),
        OptimConfig(lr=1e-2, micro_batch_tokens=budget),
    )


def test_the_teachers_top_tokens_are_a_plain_forwards(tiny_models: TinyModels, scored: list[Trajectory]) -> None:
    teacher = load_model(tiny_models.teacher)
    for turn in (scored[0].turns[0], scored[3].turns[1]):
        ids = torch.tensor([turn.prompt_ids + turn.response_ids])
        with torch.no_grad():
            log_softmax = torch.log_softmax(teacher(input_ids=ids).logits[0, :-1].float(), dim=-1)
        at = log_softmax[len(turn.prompt_ids) - 1 :]
        top = at.topk(TOP_K, dim=-1)
        assert turn.teacher_top is not None and len(turn.teacher_top) == len(turn.response_ids)
        assert [[tok for tok, _ in pairs] for pairs in turn.teacher_top] == top.indices.tolist()
        values = torch.tensor([[lp for _, lp in pairs] for pairs in turn.teacher_top])
        assert torch.allclose(values, top.values, atol=1e-4)
        own = at.gather(-1, torch.tensor(turn.response_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(turn.logp_teacher), own, atol=1e-4)


def test_the_batch_carries_them_on_every_supervised_token(batch: TokenBatch) -> None:
    top = batch.teacher_top
    assert top is not None and top.k == TOP_K
    assert torch.equal(top.scored, batch.loss_mask)
    assert bool((top.logp[top.scored] <= 0).all()) and bool((top.logp[~top.scored] == 0).all())


def test_the_logit_gradient_is_the_students_minus_the_renormalised_teachers() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 11, requires_grad=True)
    top_logp = torch.log_softmax(torch.randn(3, 11), dim=-1).topk(4, dim=-1)
    kl = forward_kl_over_top(torch.log_softmax(logits, dim=-1), top_logp.indices, top_logp.values)
    kl.sum().backward()
    q = torch.zeros(3, 11).scatter(-1, top_logp.indices, torch.softmax(top_logp.values, dim=-1))
    assert logits.grad is not None
    assert torch.allclose(logits.grad, torch.softmax(logits.detach(), dim=-1) - q, atol=1e-6)
    assert bool((kl >= 0).all())


@pytest.mark.parametrize("objective", ["opd", "atod"])
def test_the_chunked_gradient_is_the_plain_forwards(tiny_models: TinyModels, batch: TokenBatch, objective: str) -> None:
    whole = _learner(tiny_models, objective, budget=1 << 20)
    split = _learner(tiny_models, objective, budget=48)
    token_kl = whole.spec.token_kl_weights(batch, whole.hyperparameters, 3)
    assert token_kl is not None
    weights = batch_loss_weights(batch, whole.reduction)
    # no token advantage: the gradient is the KL term's alone
    measured = split._accumulate(batch, torch.zeros_like(batch.logp_old), weights, token_kl)
    reference = load_model(tiny_models.student)
    torch.manual_seed(0)
    _, log_softmax = token_logprobs(reference, batch.input_ids, batch.attention_mask)
    top = batch.teacher_top
    assert top is not None
    kl = forward_kl_over_top(log_softmax, top.ids[:, 1:], top.logp[:, 1:]) * top.scored[:, 1:]
    (kl * token_kl[:, 1:] * weights[:, 1:]).sum().backward()
    pairs = zip(reference.named_parameters(), split.model.parameters(), strict=True)
    for (name, a), b in pairs:
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-6), name
    mean_kl = float(kl.detach()[top.scored[:, 1:]].mean())
    assert measured[TOKEN_FORWARD_KL] == pytest.approx(mean_kl, rel=1e-4)


def test_a_few_updates_bring_the_forward_kl_down(tiny_models: TinyModels, batch: TokenBatch) -> None:
    learner = _learner(tiny_models, "opd", budget=1 << 20)
    kls = [learner.step(batch)[TOKEN_FORWARD_KL] for _ in range(6)]
    assert kls[-1] < 0.8 * kls[0]


def test_the_token_signal_leaves_the_advantages(batch: TokenBatch) -> None:
    opd = get_objective("opd")
    forward, metrics = opd.compute(batch, build_config("opd", {"token_kl": "forward"}), step=0)
    reverse, same = opd.compute(batch, build_config("opd", {}), step=0)
    assert not bool(forward.any()) and bool(reverse.any())
    assert metrics == same  # the sampled-token measures stay
    assert opd.token_kl_weights(batch, build_config("opd", {}), 0) is None
    assert torch.equal(
        opd.token_kl_weights(batch, build_config("opd", {"token_kl": "forward"}), 0), batch.loss_mask.float()
    )
    atod = get_objective("atod")
    params = {"token_kl": "forward", "coef_anneal_steps": 10}
    hybrid, _ = atod.compute(batch, build_config("atod", params), step=4)
    rl_only, _ = atod.compute(batch, build_config("atod", {**params, "kappa_init": 0.0, "kappa_min": 0.0}), step=4)
    assert torch.allclose(hybrid, rl_only)
    kappa, _ = atod_coefficients(4, coef_anneal_steps=10)
    assert batch.logp_teacher is not None
    w, _ = compute_tdur_weights(batch.logp_old, batch.logp_teacher, batch.turn_ids, batch.traj_ids, batch.loss_mask)
    expected = kappa * w.float() * batch.loss_mask.float()
    assert torch.allclose(atod.token_kl_weights(batch, build_config("atod", params), 4), expected)


def test_the_config_refuses_what_it_cannot_run(batch: TokenBatch) -> None:
    for params in ({"token_kl": "sideways"}, {"token_kl": "forward", "teacher_top_k": 0}, {"teacher_top_k": 21}):
        with pytest.raises(ObjectiveError):
            build_config("opd", params)
        with pytest.raises(ObjectiveError):
            build_config("atod", params)
    without = dataclasses.replace(batch, teacher_top=None)
    with pytest.raises(ObjectiveError, match="teacher's top tokens"):
        get_objective("opd").token_kl_weights(without, build_config("opd", {"token_kl": "forward"}), 0)
