"""Reply-level OPD (`kl_over: replies`, docs/design/042) on tiny Qwen3s: the turns drawn among listed replies carry
the teacher's score of every reply into the batch, their token-level OPD signal is replaced by the learner's exact KL
over the list, whose gradient (in chunks) is that of the KL computed from plain forwards, and a few updates bring the
student's choice to the teacher's; the config refuses it where it cannot run."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from trainer.config import ObjectiveConfig, OptimConfig
from trainer.errors import BatchError, ObjectiveError
from trainer.learner import LISTED_AGREE, LISTED_KEPT_KL, LISTED_TURN_WEIGHT, Learner
from trainer.models.loading import load_model
from trainer.models.tiny import TinyModels
from trainer.objectives.atod import atod_coefficients
from trainer.objectives.batch import TokenBatch
from trainer.objectives.diagnostics import LISTED_KL
from trainer.objectives.listed import ListedTurns, ReplyKl, listed_kl, most_divergent
from trainer.objectives.registry import build_config, get_objective
from trainer.objectives.tdur import compute_tdur_weights


@pytest.fixture
def batch(listed_batch: TokenBatch) -> TokenBatch:
    """6 trajectories (2 groups x 3) of 3 turns: two drawn among listed replies (lists of 3-6), one free text."""
    return listed_batch


def _learner(path: Path, objective: str, budget: int, width_multiple: int = 1, **params: object) -> Learner:
    torch.manual_seed(0)
    return Learner(
        load_model(path),
        ObjectiveConfig(name=objective, params={"kl_over": "replies", **params}),
        OptimConfig(lr=3e-2, micro_batch_tokens=budget, micro_batch_width_multiple=width_multiple),
    )


def _no_weights(batch: TokenBatch) -> torch.Tensor:
    """Token loss weights for a call without the RL term (unused there)."""
    return torch.zeros(batch.loss_mask.shape, dtype=torch.float64)


def _reference_kl(
    model: torch.nn.Module, listed: object, direction: ReplyKl = "reverse", weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean KL (`direction`) over the listed turns, each times its weight (default 1), each reply's log-prob from a
    plain forward of prompt + reply."""
    kls = []
    for prompt, replies, teacher in zip(listed.prompts, listed.replies, listed.logp_teacher, strict=True):  # type: ignore[attr-defined]
        totals = []
        for reply in replies:
            logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + reply])).logits[0, :-1].float(), dim=-1)
            totals.append(logp[len(prompt) - 1 :].gather(-1, torch.tensor(reply)[:, None]).sum())
        kls.append(listed_kl(torch.stack(totals), torch.tensor(teacher), direction))
    stacked = torch.stack(kls)
    return (stacked if weights is None else stacked * weights.to(stacked)).mean()


def test_listed_turns_reach_the_batch_with_the_teachers_scores(batch: TokenBatch) -> None:
    listed = batch.listed
    assert listed is not None and len(listed) == 12  # 6 trajectories x 2 listed turns; the free turns are not
    assert [len(r) for r in listed.replies] == [len(s) for s in listed.logp_teacher]
    assert all(max(s) < 0 for s in listed.logp_teacher)
    # each listed turn's sampled response is one of its replies
    for turn_id, replies in zip(listed.turn_ids, listed.replies, strict=True):
        (row,) = torch.nonzero((batch.turn_ids == turn_id).any(dim=1)).flatten().tolist()
        assert batch.input_ids[row][batch.turn_ids[row] == turn_id].tolist() in replies


@pytest.mark.parametrize("objective", ["opd", "atod"])
def test_the_token_signal_is_left_to_free_turns(batch: TokenBatch, objective: str) -> None:
    spec = get_objective(objective)
    params = {"tdur": "none"} if objective == "atod" else {}
    tokens, _ = spec.compute(batch, build_config(objective, params), step=0)
    replies, _ = spec.compute(batch, build_config(objective, {**params, "kl_over": "replies"}), step=0)
    assert batch.listed is not None
    on_listed = torch.isin(batch.turn_ids, torch.tensor(batch.listed.turn_ids))
    assert bool(tokens[on_listed].abs().gt(0).any())
    # on the listed turns only the RL term is left (OPD: none; ATOD: rho x GRPO's, as with kappa = 0)
    rl_only = torch.zeros_like(tokens)
    if objective == "atod":
        rl_only, _ = spec.compute(
            batch, build_config(objective, {**params, "kappa_init": 0.0, "kappa_min": 0.0}), step=0
        )
    torch.testing.assert_close(replies[on_listed], rl_only[on_listed])
    free = batch.loss_mask & ~on_listed
    assert bool(free.any())
    torch.testing.assert_close(replies[free], tokens[free])


@pytest.mark.parametrize("direction", ["reverse", "forward"])
@pytest.mark.parametrize("width_multiple", [1, 16])
def test_the_learners_gradient_is_the_mean_kl_over_plain_forwards(
    tiny_models: TinyModels, batch: TokenBatch, direction: ReplyKl, width_multiple: int
) -> None:
    """`reply_kl` picks the KL differentiated; the logged `opd/listed_kl` is the reverse one either way; rows padded
    to `optim.micro_batch_width_multiple` (docs/design/055) change nothing but the widths."""
    assert batch.listed is not None
    learner = _learner(tiny_models.student, "opd", budget=64, width_multiple=width_multiple, reply_kl=direction)
    assert len(list(batch.listed.chunks(64))) > 3  # several chunks
    widths: list[int] = []
    hook = learner.model.base_model.register_forward_pre_hook(
        lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    metrics = learner._listed_backward(batch, _no_weights(batch), kl_weight=0.7, rl_replies=False)
    hook.remove()
    assert len(widths) > 3 and all(width % width_multiple == 0 for width in widths)
    got = [p.grad.clone() for p in learner.model.parameters()]
    learner.model.zero_grad(set_to_none=True)
    reference = _reference_kl(learner.model, batch.listed, direction)
    (0.7 * reference).backward()
    reverse = float(_reference_kl(learner.model, batch.listed).detach())
    assert metrics[LISTED_KL] == pytest.approx(reverse, rel=1e-4)
    for a, p in zip(got, learner.model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-3)


def test_the_forward_kl_pulls_each_reply_by_its_probability_gap() -> None:
    """KL(q_T || q_S)'s gradient on the student's reply scores is q_S - q_T: the teacher's choice gains by its whole
    gap even where the student gives it little mass; the reverse KL's pull on it is scaled by that small mass."""
    scores = torch.tensor([-6.0, -0.1, -2.0], requires_grad=True)
    teacher = torch.tensor([-0.05, -4.0, -5.0])
    listed_kl(scores, teacher, "forward").backward()
    assert scores.grad is not None
    want = torch.softmax(scores.detach(), 0) - torch.softmax(teacher, 0)
    torch.testing.assert_close(scores.grad, want)
    forward_pull = -float(scores.grad[0])
    scores.grad = None
    listed_kl(scores, teacher, "reverse").backward()
    assert forward_pull > 0.9 and 0 < -float(scores.grad[0]) < 0.1 * forward_pull


def test_updates_bring_the_students_choice_to_the_teachers(tiny_models: TinyModels, batch: TokenBatch) -> None:
    assert batch.listed is not None
    sharp = [[0.0] + [-4.0] * (len(s) - 1) for s in batch.listed.logp_teacher]  # a teacher sure of the first reply
    batch = dataclasses.replace(batch, listed=dataclasses.replace(batch.listed, logp_teacher=sharp))
    learner = _learner(tiny_models.student, "opd", budget=4096)
    first = learner.step(batch)
    for _ in range(10):
        last = learner.step(batch)
    assert last[LISTED_KL] < 0.25 * first[LISTED_KL]
    assert last[LISTED_AGREE] == 1.0 > first[LISTED_AGREE]


def test_mini_batches_take_their_own_rows_listed_turns(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """A step of 3 mini-batches = a step on each third of the rows in turn: each takes its rows' listed turns, and
    the step's KL is their turn-weighted mean, each measured before its own update."""
    assert batch.listed is not None
    parts = [slice(0, 6), slice(6, 12), slice(12, batch.num_rows)]
    mini = _learner(tiny_models.student, "opd", budget=4096)
    mini.optim = mini.optim.model_copy(update={"mini_batches": 3})
    steps = _learner(tiny_models.student, "opd", budget=4096)
    got = mini.step(batch)
    pieces = [batch.rows(part) for part in parts]
    assert sum(len(piece.listed or []) for piece in pieces) == len(batch.listed)
    measured = [(steps.step(piece)[LISTED_KL], len(piece.listed or [])) for piece in pieces]
    assert got[LISTED_KL] == pytest.approx(sum(kl * n for kl, n in measured) / len(batch.listed), rel=1e-5)
    for a, b in zip(mini.model.parameters(), steps.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_listed_turns_order_does_not_change_a_step(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """The learner takes the listed turns shortest first (less padding per chunk): ATOD's step (KL, T-DUR weights,
    reply-level RL, 2 mini-batches, small chunks) is the same from the turns in any order."""
    assert batch.listed is not None and len(batch.listed) > 2
    listed = batch.listed.by_length()
    lengths = [len(p) + sum(map(len, r)) for p, r in zip(listed.prompts, listed.replies, strict=True)]
    assert lengths == sorted(lengths) and sorted(listed.turn_ids) == sorted(batch.listed.turn_ids)
    teacher = dict(zip(batch.listed.turn_ids, batch.listed.teacher_scores(), strict=True))
    assert [teacher[turn] for turn in listed.turn_ids] == listed.teacher_scores()  # every field moved with its turn
    reversed_turns = dataclasses.replace(batch, listed=listed.picked(list(range(len(listed)))[::-1]))
    results = []
    for order in (batch, reversed_turns):
        learner = _learner(tiny_models.student, "atod", budget=96, rl_over="replies", kl_over="replies")
        learner.optim = learner.optim.model_copy(update={"mini_batches": 2})
        results.append((learner.step(order), list(learner.model.parameters())))
    (first, first_weights), (second, second_weights) = results
    for name, value in first.items():
        if name != "learner/step_s":
            assert second[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    for a, b in zip(first_weights, second_weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_atod_weighs_the_kl_by_kappa(batch: TokenBatch) -> None:
    spec = get_objective("atod")
    config = build_config("atod", {"kl_over": "replies", "tdur": "none", "coef_anneal_steps": 10})
    assert [spec.listed_weight(config, s) for s in (0, 5, 20)] == [
        atod_coefficients(s, coef_anneal_steps=10)[0] for s in (0, 5, 20)
    ]
    assert spec.listed_weight(build_config("atod", {"tdur": "none"}), 0) == 0.0
    assert get_objective("grpo").listed_weight(build_config("grpo", {}), 0) == 0.0


def test_atod_weighs_each_listed_turns_kl_by_its_tdur_weight(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """Under `tdur: turn` (the paper's) each listed turn's KL is weighted by the T-DUR w_k that eq. 13-16 give its
    drawn reply's tokens (the same weights the token term uses); the learner's gradient is that weighted mean, and
    its step logs their mean as `opd/listed_turn_weight`."""
    assert batch.listed is not None and batch.logp_teacher is not None
    spec = get_objective("atod")
    weights = spec.listed_turn_weights(batch, build_config("atod", {"kl_over": "replies"}))
    assert weights is not None and len(weights) == len(batch.listed)
    w, _ = compute_tdur_weights(batch.logp_old, batch.logp_teacher, batch.turn_ids, batch.traj_ids, batch.loss_mask)
    for weight, turn in zip(weights.tolist(), batch.listed.turn_ids, strict=True):
        on_turn = w[(batch.turn_ids == turn) & batch.loss_mask]
        assert on_turn.numel() > 0 and on_turn.tolist() == pytest.approx([weight] * on_turn.numel())
    assert 0.0 <= float(weights.min()) < float(weights.max()) <= 1.0
    assert spec.listed_turn_weights(batch, build_config("atod", {"kl_over": "replies", "tdur": "none"})) is None
    assert get_objective("opd").listed_turn_weights(batch, build_config("opd", {"kl_over": "replies"})) is None

    learner = _learner(tiny_models.student, "atod", budget=64)
    weighted = dataclasses.replace(batch, listed=dataclasses.replace(batch.listed, weights=weights.tolist()))
    metrics = learner._listed_backward(weighted, _no_weights(batch), kl_weight=0.7, rl_replies=False)
    got = [p.grad.clone() for p in learner.model.parameters()]
    learner.model.zero_grad(set_to_none=True)
    (0.7 * _reference_kl(learner.model, batch.listed, weights=weights)).backward()
    for a, p in zip(got, learner.model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-3)
    assert metrics[LISTED_TURN_WEIGHT] == pytest.approx(float(weights.mean()))

    stepped = learner.step(batch)
    assert stepped[LISTED_TURN_WEIGHT] == pytest.approx(float(weights.mean()), rel=1e-5)
    plain = _learner(tiny_models.student, "atod", budget=4096, tdur="none").step(batch)
    assert plain[LISTED_TURN_WEIGHT] == 1.0


def test_where_it_cannot_run_it_is_refused(alfworld_config: object) -> None:
    with pytest.raises(ObjectiveError, match="set tdur: turn or none"):
        build_config("atod", {"kl_over": "replies", "tdur": "token"})
    with pytest.raises(ObjectiveError, match="kl_over must be one of"):
        build_config("opd", {"kl_over": "reply"})
    with pytest.raises(ObjectiveError, match="reply_kl: forward needs kl_over: replies"):
        build_config("opd", {"reply_kl": "forward"})
    with pytest.raises(ObjectiveError, match="reply_kl must be one of"):
        build_config("atod", {"kl_over": "replies", "tdur": "none", "reply_kl": "both"})
    with pytest.raises(ValueError, match=r"set rollout\.action_match: choice"):
        alfworld_config("localhost:1", objective={"name": "opd", "params": {"kl_over": "replies"}})  # type: ignore[operator]
    config = alfworld_config(  # type: ignore[operator]
        "localhost:1", objective={"name": "opd", "params": {"kl_over": "replies"}}, rollout={"action_match": "choice"}
    )
    assert dataclasses.asdict(build_config("opd", config.objective.params))["kl_over"] == "replies"


def test_the_rollout_records_its_score_of_every_listed_reply(tiny_models: TinyModels, batch: TokenBatch) -> None:
    """The student's draw scored every listed reply; the batch carries those totals, a plain forward's (the same
    weights: the fixture's rollout is the student)."""
    assert batch.listed is not None and batch.listed.logp_rollout is not None
    model = load_model(tiny_models.student)
    listed = dataclasses.replace(batch.listed, logp_teacher=batch.listed.logp_rollout)
    with torch.no_grad():
        self_kl = _reference_kl(model, listed)  # KL of a plain forward's choice from the recorded one
    assert float(self_kl) == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("direction", ["reverse", "forward"])
def test_listed_keep_trains_on_the_most_divergent_turns(
    tiny_models: TinyModels, batch: TokenBatch, direction: ReplyKl
) -> None:
    """`optim.listed_keep` 0.5: the step is a full step on the half of the listed turns (rounded up) whose KL between
    the rollout's and the teacher's choice is largest, and logs the share of the KL they hold."""
    listed = batch.listed
    assert listed is not None and listed.logp_rollout is not None
    kls = [
        float(listed_kl(torch.tensor(rollout), torch.tensor(teacher), direction))
        for rollout, teacher in zip(listed.logp_rollout, listed.teacher_scores(), strict=True)
    ]
    top = sorted(sorted(range(len(kls)), key=lambda i: kls[i], reverse=True)[: (len(kls) + 1) // 2])
    assert 0 < len(top) < len(kls)
    kept = _learner(tiny_models.student, "opd", budget=4096, reply_kl=direction)
    kept.optim = kept.optim.model_copy(update={"listed_keep": 0.5})
    full = _learner(tiny_models.student, "opd", budget=4096, reply_kl=direction)
    compute = full.spec.compute  # the dropped turns' token signal stays left out, as every listed turn's is
    full.spec = copy.copy(full.spec)
    object.__setattr__(full.spec, "compute", lambda _, config, *, step: compute(batch, config, step=step))
    metrics = kept.step(batch)
    reference = full.step(dataclasses.replace(batch, listed=listed.picked(top)))
    assert metrics[LISTED_KEPT_KL] == pytest.approx(sum(kls[i] for i in top) / sum(kls), rel=1e-5)
    assert metrics[LISTED_KL] == pytest.approx(reference[LISTED_KL], rel=1e-5)
    for a, b in zip(kept.model.parameters(), full.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_most_divergent_ranks_by_the_weighted_kl_and_keeps_the_order() -> None:
    sure = [0.0, -9.0]  # the teacher's choice: the first reply
    listed = ListedTurns(
        turn_ids=[3, 5, 8, 9],
        prompts=[[1]] * 4,
        replies=[[[2], [3]]] * 4,
        logp_teacher=[sure] * 4,
        logp_rollout=[[-9.0, 0.0], [0.0, -9.0], [-1.0, -0.5], [-9.0, 0.0]],  # far, agrees, near, far
        weights=[0.1, 1.0, 1.0, 1.0],
    )
    kept, share = most_divergent(listed, 0.5, "reverse")
    assert kept.turn_ids == [8, 9] and kept.weights == [1.0, 1.0]  # turn 3 is far but weighted 0.1
    assert listed.logp_rollout is not None
    pairs = zip([0.1, 1.0, 1.0, 1.0], listed.logp_rollout, strict=True)
    kls = [w * float(listed_kl(torch.tensor(r), torch.tensor(sure))) for w, r in pairs]
    assert share == pytest.approx((kls[2] + kls[3]) / sum(kls))
    assert most_divergent(listed, 0.01, "reverse")[0].turn_ids == [9]  # one turn at least
    assert most_divergent(listed, 1.0, "forward")[0].turn_ids == [3, 5, 8, 9]
    with pytest.raises(BatchError, match="rollout's scores"):
        most_divergent(dataclasses.replace(listed, logp_rollout=None), 0.5, "reverse")
    with pytest.raises(BatchError, match="logp_rollout needs one score per listed reply"):
        dataclasses.replace(listed, logp_rollout=[[0.0]] * 4)


def test_listed_keep_is_refused_with_the_reply_level_rl_term(tiny_models: TinyModels) -> None:
    with pytest.raises(ObjectiveError, match="rl_over: replies needs every drawn one"):
        Learner(
            load_model(tiny_models.student),
            ObjectiveConfig(name="atod", params={"kl_over": "replies", "rl_over": "replies", "tdur": "none"}),
            OptimConfig(listed_keep=0.5),
        )
