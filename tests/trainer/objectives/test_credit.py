"""Turn credits against hand-computed trees and anchor groups, through the batch composer's turn states."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from trainer.batching import SyncGroups
from trainer.errors import ObjectiveError
from trainer.objectives import build_config, get_objective
from trainer.objectives.credit import GRPO_NONZERO_SHARE, NONZERO_SHARE, rl_advantage
from trainer.rollout.types import Trajectory, Turn


def turn(observation: str, node: int | None = None, *, shared: bool = False, token: int = 5) -> Turn:
    """A two-token turn ending in `observation`; `shared`: a branch's copy of its parent's turn (not supervised)."""
    return Turn(
        prompt_ids=[1, 2],
        response_ids=[token, token + 1],
        logp_old=[-0.5, -0.5],
        response_text="go",
        action="go",
        observation=observation,
        node=node,
        supervise_from=2 if shared else 0,
    )


def episode(turns: list[Turn], won: bool, start: str = "start", group: int = 0) -> Trajectory:
    turns[-1].done = True
    return Trajectory(task_id="t", group=group, seed=0, turns=turns, won=won, initial_observation=start)


def tree() -> list[Trajectory]:
    """root -t0-> a -t1-> b -t2-> c (lost); at a two continuations: a -t1'-> d -t2'-> e (won), a -t1''-> f (won).

    V(root) = V(a) = 2/3, V(b) = V(c) = 0, V(d) = V(e) = V(f) = 1; a is the only fork (children b, d, f)."""
    main = episode([turn("a", 1), turn("b", 2), turn("c", 3)], won=False)
    first = episode([turn("a", 1, shared=True), turn("d", 4), turn("e", 5)], won=True)
    second = episode([turn("a", 1, shared=True), turn("f", 6)], won=True)
    return [main, first, second]


def credit(trajectories: list[Trajectory], advantage: str, **params: float) -> tuple[list[float], dict[str, float]]:
    """Each supervised turn's credit, in batch order (main's turns, then each branch's own)."""
    batch = SyncGroups().compose(trajectories)
    tokens, metrics = rl_advantage(
        batch,
        advantage=advantage,
        epsilon=params.get("epsilon", 1e-6),
        gamma=params.get("gamma", 0.95),
        omega=params.get("omega", 1.0),
    )
    assert batch.states is not None
    per_turn = [float(tokens[batch.turn_ids == u].unique().item()) for u in range(batch.states.num_turns)]
    return per_turn, metrics


def test_tree_rows_are_one_per_distinct_turn() -> None:
    batch = SyncGroups().compose(tree())
    assert batch.num_rows == 6, "t0 once (its two copies are context), t1 t2 t1' t2' t1''"
    assert batch.states is not None
    assert batch.states.parent.tolist() == [-1, 0, 1, 2, 1, 4, 1]
    assert batch.states.values(batch.rewards).tolist() == pytest.approx([2 / 3, 2 / 3, 0, 0, 1, 1, 1])


def test_tree_monte_carlo_credit_is_value_after_minus_value_before() -> None:
    values, metrics = credit(tree(), "tree_mc")
    # t0: V(a)-V(root); t1: V(b)-V(a); t2: V(c)-V(b); t1': V(d)-V(a); t2': V(e)-V(d); t1'': V(f)-V(a)
    assert values == pytest.approx([0.0, -2 / 3, 0.0, 1 / 3, 0.0, 1 / 3])
    assert metrics[NONZERO_SHARE] == pytest.approx(3 / 6)
    assert metrics[GRPO_NONZERO_SHARE] == 1.0


def test_tree_sibling_credit_is_branch_value_minus_siblings_mean_at_the_nearest_fork() -> None:
    values, metrics = credit(tree(), "tree_sibling")
    # fork a: siblings b, d, f with values 0, 1, 1 (mean 2/3); t0 has no fork above it (one root episode)
    assert values == pytest.approx([0.0, -2 / 3, -2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert metrics[NONZERO_SHARE] == pytest.approx(5 / 6)
    assert metrics["credit/forks"] == 1.0


def test_tree_credits_of_independent_episodes_are_grpo_centred_on_the_first_turn() -> None:
    group = [episode([turn("x"), turn("y")], won=True), episode([turn("x"), turn("z")], won=False)]
    mc, _ = credit(group, "tree_mc")
    sibling, _ = credit(group, "tree_sibling")
    assert mc == pytest.approx([0.5, 0.0, -0.5, 0.0]), "the root is the only state two episodes share"
    assert sibling == pytest.approx([0.5, 0.5, -0.5, -0.5]), "every turn: own return minus the group mean"


def test_a_tree_of_equal_outcomes_credits_nothing() -> None:
    lost = tree()
    for trajectory in lost:
        trajectory.won = False
    for advantage in ("tree_mc", "tree_sibling", "outcome", "anchor"):
        values, metrics = credit(lost, advantage)
        assert values == pytest.approx([0.0] * 6), advantage
        assert metrics[NONZERO_SHARE] == 0.0


def test_anchor_credit_adds_the_step_advantage_of_recurring_observations() -> None:
    """Three episodes from `s0`: `x` recurs in two of them, `y` once (GiGPO, gamma 0.5, omega 1)."""
    group = [
        episode([turn("x"), turn("end")], won=True, start="s0"),
        episode([turn("x"), turn("y"), turn("end")], won=False, start="s0"),
        episode([turn("end")], won=False, start="s0"),
    ]
    values, metrics = credit(group, "anchor", gamma=0.5, epsilon=1e-12)
    grpo = [2 / 3 / math.sqrt(1 / 3), -1 / 3 / math.sqrt(1 / 3)]
    # anchor s0: returns 0.5, 0, 0 (std sqrt(1/12)); anchor x: returns 1, 0 (std sqrt(1/2)); y alone: 0
    s0 = [(1 / 3) / math.sqrt(1 / 12), (-1 / 6) / math.sqrt(1 / 12)]
    x = 0.5 / math.sqrt(0.5)
    expected = [grpo[0] + s0[0], grpo[0] + x, grpo[1] + s0[1], grpo[1] - x, grpo[1], grpo[1] + s0[1]]
    assert values == pytest.approx(expected, rel=1e-6)
    assert metrics["credit/anchor_turn_share"] == pytest.approx(5 / 6)


def test_outcome_credit_is_grpo_unchanged() -> None:
    batch = SyncGroups().compose(tree())
    with_states, _ = get_objective("grpo").compute(batch, build_config("grpo"), step=0)
    without, _ = get_objective("grpo").compute(dataclasses.replace(batch, states=None), build_config("grpo"), step=0)
    assert torch.equal(with_states, without)


def test_atod_rl_term_takes_the_tree_credit() -> None:
    batch = SyncGroups().compose(tree())
    batch = dataclasses.replace(batch, logp_teacher=batch.logp_old.clone())  # teacher = student: no OPD signal
    config = build_config("atod", {"advantage": "tree_mc", "anneal": False, "rho_init": 1.0})
    advantages, _ = get_objective("atod").compute(batch, config, step=0)
    expected, _ = rl_advantage(batch, advantage="tree_mc", epsilon=1e-6, gamma=0.95, omega=1.0)
    assert torch.allclose(advantages, expected)


def test_unknown_advantage_and_missing_states_are_refused() -> None:
    with pytest.raises(ObjectiveError, match="unknown advantage 'vine'"):
        build_config("grpo", {"advantage": "vine"})
    batch = dataclasses.replace(SyncGroups().compose(tree()), states=None)
    with pytest.raises(ObjectiveError, match="needs the batch's turn states"):
        get_objective("grpo").compute(batch, build_config("grpo", {"advantage": "tree_mc"}), step=0)
