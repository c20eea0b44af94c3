"""BranchOPD diagnostics (paper 002 section 5 and Appendix C; OBJECTIVES.md section 6), logged every step.

Computed from the step's main trajectories and branches (a branch's `group` is its main's, its
`fork` the (turn, offset) it started from). Rates whose condition never happened are NaN (logged
as null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainer.rollout.types import Trajectory

ALT_MASS = "branch/alt_mass"
"""mean over forks of 1 - pi_old(a_0 | s), a_0 the main trajectory's token at the fork."""
EBR = "branch/ebr"
"""share of branches whose action sequence differs from their main trajectory's."""
NSR = "branch/nsr"
"""share of branches with an action that their main trajectory never took."""
RESCUE_RATE = "branch/rescue_rate"
"""P(some branch succeeds | main fails), over tasks with branches."""
HARM_RATE = "branch/harm_rate"
"""P(every branch fails | main succeeds), over tasks with branches."""
PROTOCOL_VIOLATION_RATE = "branch/protocol_violation_rate"
"""share of trajectories (mains and branches) with a PBR constraint violated in their trained tokens."""
STUDENT_TOKENS = "branch/student_tokens"
"""tokens the student generated this step: whole mains plus each branch from its fork on."""
INDEPENDENT_TOKENS = "branch/independent_tokens"
"""what the same number of independent rollouts (1 + forks * k per task) would generate: that many mains."""
TOKEN_SAVING = "branch/token_saving"
"""1 - student_tokens / independent_tokens (paper: 19.1 % on ALFWorld, 31.2 % on WebShop)."""
FORKS = "branch/forks"
"""forks selected per main trajectory (B_eff)."""
BRANCHES = "branch/branches"
"""branch trajectories this step."""

BRANCH_DIAGNOSTICS = (
    ALT_MASS,
    EBR,
    NSR,
    RESCUE_RATE,
    HARM_RATE,
    PROTOCOL_VIOLATION_RATE,
    STUDENT_TOKENS,
    INDEPENDENT_TOKENS,
    TOKEN_SAVING,
)
"""The diagnostics the issue names, in its order (plotted)."""


def generated_tokens(trajectory: Trajectory) -> int:
    """Student tokens this trajectory generated itself (a branch's kept prefix and copied turns excluded)."""
    return sum(
        len(t.response_ids) - min(t.supervise_from, len(t.response_ids)) for t in trajectory.turns if not t.teacher
    )


def actions(trajectory: Trajectory) -> tuple[str | None, ...]:
    """The action sequence (None for an invalid turn)."""
    return tuple(turn.action for turn in trajectory.turns)


def violated(trajectory: Trajectory) -> bool:
    """A PBR constraint in the trained part of the trajectory was broken by the sampled token."""
    return any(
        c.violated_by(turn.response_ids)
        for turn in trajectory.turns
        if turn.supervised
        for c in turn.constraints
        if c.offset >= turn.supervise_from
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def branch_metrics(mains: Sequence[Trajectory], branches: Sequence[Trajectory]) -> dict[str, float]:
    """Every BranchOPD diagnostic of one step."""
    by_group: dict[int, list[Trajectory]] = {}
    for branch in branches:
        by_group.setdefault(branch.group, []).append(branch)
    main_of = {main.group: main for main in mains}
    alt_mass, differs, new_action, rescued, harmed = [], [], [], [], []
    student = independent = forks = 0
    for group, main in main_of.items():
        kept = [b for b in by_group.get(group, []) if not b.dropped]
        own = generated_tokens(main)
        student += own + sum(generated_tokens(b) for b in by_group.get(group, []))
        independent += own * (1 + len(by_group.get(group, [])))
        points = sorted({b.fork for b in by_group.get(group, []) if b.fork is not None})
        forks += len(points)
        for turn, offset in points:
            alt_mass.append(1.0 - math.exp(main.turns[turn].logp_old[offset]))
        main_actions = actions(main)
        taken = {a for a in main_actions if a is not None}
        for branch in kept:
            differs.append(float(actions(branch) != main_actions))
            new_action.append(float(any(a is not None and a not in taken for a in actions(branch))))
        if kept and not main.dropped:
            if main.won:
                harmed.append(float(not any(b.won for b in kept)))
            else:
                rescued.append(float(any(b.won for b in kept)))
    complete = [t for t in [*mains, *branches] if not t.dropped]
    return {
        ALT_MASS: _mean(alt_mass),
        EBR: _mean(differs),
        NSR: _mean(new_action),
        RESCUE_RATE: _mean(rescued),
        HARM_RATE: _mean(harmed),
        PROTOCOL_VIOLATION_RATE: _mean([float(violated(t)) for t in complete]),
        STUDENT_TOKENS: float(student),
        INDEPENDENT_TOKENS: float(independent),
        TOKEN_SAVING: 1.0 - student / independent if independent else math.nan,
        FORKS: forks / len(main_of) if main_of else math.nan,
        BRANCHES: float(len(branches)),
    }
