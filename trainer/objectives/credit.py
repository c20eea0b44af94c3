"""Turn credit for the RL term: which advantage each supervised turn gets (`advantage:` of grpo and atod).

    outcome       A_u = (R_i - mean_g R) / (std_g R + eps)                       GRPO, per trajectory i of turn u
    anchor        A_u = outcome_u + omega (G_u - mean_a G) / (std_a G + eps)     GiGPO: a = u's anchor state,
                                                                                 G_u = gamma^(to_go_u) R_i
    tree_mc       A_u = V(s'_u) - V(s_u)                                         VinePPO: V = mean outcome below
    tree_sibling  A_u = V(c_u) - mean_{c in children(f_u)} V(c)                  TreeRL / Tree-GRPO: f_u = the
                                                                                 nearest fork above u, c_u its child
                                                                                 on u's path

(docs/trainer-objectives.md section "Turn credit" has them in full.) Every function returns the
per-supervised-turn advantage (U,) and its metrics; `rl_advantage` puts it on the tokens. A new
credit registers with `register_credit`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.batch import TokenBatch
from trainer.objectives.outcome import broadcast_trajectory_values, compute_grpo_outcome_advantage
from trainer.objectives.segments import segment_count, segment_index, segment_sum
from trainer.objectives.states import TurnStates

CreditFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
"""`fn(batch, states, grpo (T,), *, epsilon, gamma, omega) -> (A (U,), metrics)`."""
NONZERO = 1e-8
"""|A| above which a turn counts as credited (`credit/nonzero_turn_share`)."""
NONZERO_SHARE = "credit/nonzero_turn_share"
GRPO_NONZERO_SHARE = "credit/grpo_nonzero_turn_share"

_CREDITS: dict[str, CreditFn] = {}


def register_credit(name: str, fn: CreditFn) -> None:
    """Add a turn credit under `name` (a name registers once)."""
    if name in _CREDITS:
        raise ObjectiveError(f"turn credit {name!r} is already registered", reason="CREDIT_ALREADY_REGISTERED")
    _CREDITS[name] = fn


def credit_names() -> tuple[str, ...]:
    """Every registered turn credit, sorted."""
    return tuple(sorted(_CREDITS))


def check_credit(name: str) -> None:
    """ObjectiveError (INVALID_OBJECTIVE_CONFIG) unless `name` is a registered credit."""
    if name not in _CREDITS:
        raise ObjectiveError(
            f"unknown advantage {name!r}; registered: {', '.join(credit_names())}", reason="INVALID_OBJECTIVE_CONFIG"
        )


def _turn_trajectory(batch: TokenBatch, turns: int) -> torch.Tensor:
    """(U,) trajectory of each supervised turn."""
    out = torch.zeros(turns, dtype=torch.long, device=batch.traj_ids.device)
    rows = batch.traj_ids[:, None].expand_as(batch.turn_ids)
    mask = batch.turn_ids >= 0
    return out.scatter(0, batch.turn_ids[mask], rows[mask])


def outcome_credit(
    batch: TokenBatch, states: TurnStates, grpo: torch.Tensor, **_: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's trajectory advantage on each of its turns."""
    return grpo[_turn_trajectory(batch, states.num_turns)], {}


def anchor_credit(
    batch: TokenBatch, states: TurnStates, grpo: torch.Tensor, *, epsilon: float, gamma: float, omega: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """GiGPO: the episode advantage plus omega times the step advantage within u's anchor-state group."""
    traj = _turn_trajectory(batch, states.num_turns)
    returns = gamma ** states.to_go.to(torch.float64) * batch.rewards.to(torch.float64)[traj]
    _, group = segment_index(states.anchor)
    size = int(group.max()) + 1 if group.numel() else 0
    count = segment_count(group, size, returns.dtype)
    centred = returns - (segment_sum(returns, group, size) / count)[group]
    std = (segment_sum(centred * centred, group, size) / (count - 1).clamp(min=1.0)).sqrt()
    step = centred / (std[group] + epsilon)
    recurring = count[group] > 1
    metrics = {"credit/anchor_turn_share": float(recurring.to(torch.float64).mean()) if size else 0.0}
    return grpo[traj].to(torch.float64) + omega * step, metrics


def tree_mc_credit(
    batch: TokenBatch, states: TurnStates, grpo: torch.Tensor, **_: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """VinePPO: V(state after u) - V(state before u), V the mean outcome of the trajectories below a state."""
    del grpo
    value = states.values(batch.rewards)
    before = states.parent[states.after]
    return value[states.after] - torch.where(before >= 0, value[before.clamp(min=0)], value[states.after]), {}


def tree_sibling_credit(
    batch: TokenBatch, states: TurnStates, grpo: torch.Tensor, **_: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """TreeRL / Tree-GRPO: u's branch value minus the mean value of its siblings at the nearest fork above u."""
    del grpo
    value = states.values(batch.rewards)
    parent = states.parent
    has_parent = parent >= 0
    children = torch.bincount(parent[has_parent], minlength=parent.numel()).to(value.dtype)
    sibling_mean = torch.zeros_like(value).index_add(0, parent[has_parent], value[has_parent])
    sibling_mean = sibling_mean / children.clamp(min=1.0)
    child = states.after.clone()
    fork = parent[child]
    while bool((climb := (fork >= 0) & (children[fork.clamp(min=0)] < 2)).any()):
        child = torch.where(climb, fork, child)
        fork = torch.where(climb, parent[fork.clamp(min=0)], fork)
    credit = torch.where(fork >= 0, value[child] - sibling_mean[fork.clamp(min=0)], torch.zeros_like(value[child]))
    return credit, {"credit/forks": float((children >= 2).sum())}


def rl_advantage(
    batch: TokenBatch, *, advantage: str, epsilon: float, gamma: float, omega: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The RL advantage (N, S) under credit `advantage`, 0 off `loss_mask`; metrics: GRPO's, the credit's,
    and the share of supervised turns with a non-zero advantage under it and under GRPO."""
    check_credit(advantage)
    grpo, metrics = compute_grpo_outcome_advantage(batch.rewards, batch.group_ids, epsilon=epsilon)
    states = batch.states
    if states is None and advantage == "outcome":
        return broadcast_trajectory_values(grpo.to(batch.logp_old.dtype), batch.traj_ids, batch.loss_mask), metrics
    if states is None:
        raise ObjectiveError(
            f"advantage {advantage!r} needs the batch's turn states (SyncGroups composes them)",
            reason="MISSING_TURN_STATES",
        )
    if int(batch.turn_ids.max()) >= states.num_turns:
        raise ObjectiveError(
            f"turn ids reach {int(batch.turn_ids.max())} but the batch has {states.num_turns} turn states",
            reason="MISSING_TURN_STATES",
        )
    credit, extra = _CREDITS[advantage](batch, states, grpo, epsilon=epsilon, gamma=gamma, omega=omega)
    metrics.update(extra)
    metrics[NONZERO_SHARE] = float((credit.abs() > NONZERO).to(torch.float64).mean())
    baseline = grpo[_turn_trajectory(batch, states.num_turns)]
    metrics[GRPO_NONZERO_SHARE] = float((baseline.abs() > NONZERO).to(torch.float64).mean())
    per_token = credit.to(batch.logp_old.dtype)[batch.turn_ids.clamp(min=0)]
    return torch.where(batch.loss_mask, per_token, torch.zeros_like(per_token)), metrics


for _name, _fn in (
    ("outcome", outcome_credit),
    ("anchor", anchor_credit),
    ("tree_mc", tree_mc_credit),
    ("tree_sibling", tree_sibling_credit),
):
    register_credit(_name, _fn)
