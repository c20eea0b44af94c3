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
OBS_DISAGREEMENT = "branch/observation_disagreement"
"""share of branches whose observation sequence differs from their main trajectory's (paper Table 14)."""
NEW_ACTIONS = "branch/new_actions"
"""mean number of actions per branch that their main trajectory never took (Table 14's "mean new actions")."""
FIRST_CHANGE_TOKENS = "branch/first_change_tokens"
"""mean tokens generated from the fork to the end of the first turn whose action differs from the main's at that
turn, over branches that change an action (paper: 12-18 on ALFWorld, 1.5-2 on WebShop)."""
LOW_LIKELIHOOD_RATE = "branch/low_likelihood_rate"
"""share of branch suffixes whose mean student log-prob over their first `LOW_LIKELIHOOD_WINDOW` generated tokens
is below the `LOW_LIKELIHOOD_QUANTILE` of the step's on-policy windows of that length (the mains'; paper Table 9:
5.8 % for resampling)."""
ENV_STEPS = "branch/env_steps"
"""environment steps the branches played from their forks on."""
REPLAY_STEPS = "branch/replay_steps"
"""steps a restore by action replay re-plays to reach the forks (the turns before each fork; 0 with a native
snapshot restore)."""
ENV_STEP_RATIO = "branch/env_step_ratio"
"""(mains' + branches' + replay steps) / mains' steps: the environment cost of branching against one rollout per
task when forks are restored by replay (the paper's 3.02x on ALFWorld)."""
LOW_LIKELIHOOD_WINDOW = 64
LOW_LIKELIHOOD_QUANTILE = 0.05

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


def generated_logprobs(trajectory: Trajectory) -> list[float]:
    """The student's log-probs of the tokens this trajectory generated itself, in order."""
    return [
        lp for t in trajectory.turns if not t.teacher for lp in t.logp_old[min(t.supervise_from, len(t.logp_old)) :]
    ]


def first_change_tokens(main: Trajectory, branch: Trajectory) -> int | None:
    """Tokens generated from the fork to the end of the branch's first turn whose action is not the main's at
    that turn index; None when the branch changes no action."""
    if branch.fork is None:
        return None
    tokens = 0
    for index in range(branch.fork[0], len(branch.turns)):
        turn = branch.turns[index]
        tokens += len(turn.response_ids) - min(turn.supervise_from, len(turn.response_ids))
        main_action = main.turns[index].action if index < len(main.turns) else None
        if index >= len(main.turns) or turn.action != main_action:
            return tokens
    return None


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else math.nan


def on_policy_windows(mains: Sequence[Trajectory], width: int = LOW_LIKELIHOOD_WINDOW) -> list[float]:
    """Mean log-prob of every whole `width`-token window of the mains' generated tokens (non-overlapping)."""
    means = []
    for main in mains:
        logps = generated_logprobs(main)
        means += [sum(logps[i : i + width]) / width for i in range(0, len(logps) - width + 1, width)]
    return means


def branch_metrics(mains: Sequence[Trajectory], branches: Sequence[Trajectory]) -> dict[str, float]:
    """Every BranchOPD diagnostic of one step."""
    by_group: dict[int, list[Trajectory]] = {}
    for branch in branches:
        by_group.setdefault(branch.group, []).append(branch)
    main_of = {main.group: main for main in mains}
    alt_mass, differs, new_action, rescued, harmed = [], [], [], [], []
    obs_differs, new_counts, change_tokens, suffixes = [], [], [], []
    student = independent = forks = main_steps = branch_steps = replay_steps = 0
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
        main_steps += main.num_turns
        for branch in kept:
            differs.append(float(actions(branch) != main_actions))
            new = [a for a in actions(branch) if a is not None and a not in taken]
            new_action.append(float(bool(new)))
            new_counts.append(float(len(new)))
            obs_differs.append(float([t.observation for t in branch.turns] != [t.observation for t in main.turns]))
            changed = first_change_tokens(main, branch)
            if changed is not None:
                change_tokens.append(float(changed))
            start = branch.fork[0] if branch.fork else 0
            branch_steps += branch.num_turns - start
            replay_steps += start
            suffix = generated_logprobs(branch)[:LOW_LIKELIHOOD_WINDOW]
            if len(suffix) == LOW_LIKELIHOOD_WINDOW:
                suffixes.append(sum(suffix) / LOW_LIKELIHOOD_WINDOW)
        if kept and not main.dropped:
            if main.won:
                harmed.append(float(not any(b.won for b in kept)))
            else:
                rescued.append(float(any(b.won for b in kept)))
    complete = [t for t in [*mains, *branches] if not t.dropped]
    threshold = _quantile(on_policy_windows([m for m in mains if not m.dropped]), LOW_LIKELIHOOD_QUANTILE)
    low = [float(mean < threshold) for mean in suffixes] if not math.isnan(threshold) else []
    return {
        OBS_DISAGREEMENT: _mean(obs_differs),
        NEW_ACTIONS: _mean(new_counts),
        FIRST_CHANGE_TOKENS: _mean(change_tokens),
        LOW_LIKELIHOOD_RATE: _mean(low),
        ENV_STEPS: float(branch_steps),
        REPLAY_STEPS: float(replay_steps),
        ENV_STEP_RATIO: (main_steps + branch_steps + replay_steps) / main_steps if main_steps else math.nan,
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
