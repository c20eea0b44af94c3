"""PBR: detection rules on token ids and the capped (un)likelihood loss on hand-built distributions."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.branching.rules import Constraint, EosAfterAnswer, StrayClosingTag, make_rules, scan
from trainer.errors import TrainerError
from trainer.models.tiny import TinyModels
from trainer.objectives.pbr import ConstraintBatch, PbrConfig, event_logprob, pbr_loss

THINK_END, ANSWER_END, EOS = 7, 9, 2


def test_stray_closing_tag_fires_once_per_leading_tag() -> None:
    rule = StrayClosingTag(THINK_END)
    assert rule.scan([THINK_END, THINK_END, 5, THINK_END]) == [
        Constraint(0, (THINK_END,), False, "stray_close_think"),
        Constraint(1, (THINK_END,), False, "stray_close_think"),
    ]
    assert rule.scan([5, THINK_END]) == []
    assert rule.scan([]) == []


def test_eos_after_answer_fires_only_when_something_else_follows() -> None:
    rule = EosAfterAnswer(ANSWER_END, (EOS,))
    assert rule.scan([4, ANSWER_END, 5, 6]) == [Constraint(2, (EOS,), True, "eos_after_answer")]
    assert rule.scan([4, ANSWER_END, EOS]) == []
    assert rule.scan([4, ANSWER_END]) == []  # stopped at the answer: nothing to repair


def test_violation_is_read_from_the_sampled_token() -> None:
    assert Constraint(0, (THINK_END,), False, "r").violated_by([THINK_END, 1])
    assert not Constraint(0, (THINK_END,), False, "r").violated_by([1])
    assert Constraint(2, (EOS,), True, "r").violated_by([1, ANSWER_END, 5])
    assert not Constraint(2, (EOS,), True, "r").violated_by([1, ANSWER_END, EOS])


def test_rules_are_built_per_tokenizer_by_name(tiny_models: TinyModels) -> None:
    from trainer.models.loading import load_tokenizer

    tokenizer = load_tokenizer(tiny_models.student)
    think_end = tokenizer.encode("</think>", add_special_tokens=False)[0]
    rules = make_rules(["stray_close_think", "eos_after_answer"], tokenizer)
    response = tokenizer.encode("</think><think>x</think><action>look</action>", add_special_tokens=False)
    assert scan(rules, response) == [Constraint(0, (think_end,), False, "stray_close_think")]
    with pytest.raises(TrainerError, match="unknown PBR rule"):
        make_rules(["no_such_rule"], tokenizer)


def _batch_dist(p_event: float) -> torch.Tensor:
    """(1, 4) next-token log-softmax at the constraint's prefix, giving tokens {1, 2} mass p_event."""
    probs = torch.tensor([[(1 - p_event) / 2, p_event / 2, p_event / 2, (1 - p_event) / 2]])
    return probs.log().requires_grad_(True)


def _one(target: bool) -> ConstraintBatch:
    return ConstraintBatch(
        rows=torch.tensor([0]),
        positions=torch.tensor([2]),
        token_sets=torch.tensor([[1, 2, -1]]),
        targets=torch.tensor([target]),
    )


def test_event_logprob_sums_the_set_and_ignores_padding() -> None:
    assert float(event_logprob(_batch_dist(0.3), _one(True)).detach()) == pytest.approx(math.log(0.3), abs=1e-6)


@pytest.mark.parametrize("target", [True, False])
def test_loss_values_and_gradient_directions(target: bool) -> None:
    dist = _batch_dist(0.3)
    loss, extra = pbr_loss(dist, _one(target), weight=0.01, cap=None, normaliser=1)
    u = -math.log(0.3) if target else -math.log(0.7)
    assert float(loss.detach()) == pytest.approx(0.01 * u, rel=1e-5)
    assert extra["event_prob_sum"] == pytest.approx(0.3, abs=1e-6)
    loss.backward()
    assert dist.grad is not None
    grad_event = float(dist.grad[0, 1] + dist.grad[0, 2])
    # Descending the loss raises the event's log-probs for b = 1 and lowers them for b = 0.
    assert (grad_event < 0) == target and grad_event != 0


def test_cap_stops_the_gradient_above_it_and_normaliser_averages() -> None:
    dist = _batch_dist(0.99)  # -log(1 - 0.99) = 4.6 -> 0.046 weighted, above the cap 0.02
    loss, _ = pbr_loss(dist, _one(False), weight=0.01, cap=0.02, normaliser=4)
    assert float(loss.detach()) == pytest.approx(0.02 / 4)
    loss.backward()
    assert dist.grad is not None and float(dist.grad.abs().sum()) == 0.0


def test_cap_on_the_term_caps_u_before_the_weight() -> None:
    """`pbr.cap_on: term` (the paper's lambda * mean psi(u) read literally): min(u, cap) * lambda."""
    dist = _batch_dist(0.99)  # u = 4.6: capped at 0.02 before the weight, 0.01 * 0.02
    loss, _ = pbr_loss(dist, _one(False), weight=0.01, cap=0.02, normaliser=1, cap_on="term")
    assert float(loss.detach()) == pytest.approx(0.01 * 0.02)
    small = _batch_dist(0.01)  # u = 0.01005 < cap: identical either way
    a, _ = pbr_loss(small, _one(False), weight=0.01, cap=0.02, normaliser=1, cap_on="term")
    b, _ = pbr_loss(_batch_dist(0.01), _one(False), weight=0.01, cap=0.02, normaliser=1)
    assert float(a.detach()) == pytest.approx(float(b.detach()))
    with pytest.raises(ValueError, match="cap_on"):
        PbrConfig(cap_on="loss")


def test_no_constraint_no_term_and_row_selection() -> None:
    empty = ConstraintBatch(
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
        torch.zeros((0, 1), dtype=torch.long),
        torch.zeros(0, dtype=torch.bool),
    )
    loss, _ = pbr_loss(_batch_dist(0.5), empty, weight=0.01, cap=0.02, normaliser=0)
    assert float(loss) == 0.0
    many = ConstraintBatch(
        torch.tensor([0, 3, 5]),
        torch.tensor([1, 2, 3]),
        torch.tensor([[1], [2], [3]]),
        torch.tensor([True, False, True]),
    )
    part = many.in_rows(slice(3, 6))
    assert part.rows.tolist() == [0, 2] and part.positions.tolist() == [2, 3]
    with pytest.raises(TrainerError, match="pbr"):
        PbrConfig(weight=-1.0)
