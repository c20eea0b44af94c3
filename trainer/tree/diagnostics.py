"""Tree rollout diagnostics, logged every step (docs/tree-rollouts.md); the learner logs the credit shares
(`credit/nonzero_turn_share` against `credit/grpo_nonzero_turn_share`)."""

from __future__ import annotations

from collections.abc import Sequence

from trainer.rollout import RolloutStats, Trajectory

BRANCHES = "tree/branches"
"""continuations played this step (every episode that is not a root)."""
STUDENT_TOKENS = "tree/student_tokens"
"""tokens the student generated this step: whole roots plus each continuation from its fork on."""
FORKS = "tree/env_forks"
"""sessions put back into a recorded state this step (one restore plus M - 1 ForkSession per forked state)."""
FORK_S = "tree/env_fork_s"
"""seconds those restores and forks took, summed over the calls."""
DISTINCT_TURNS = "tree/distinct_turns"
"""supervised turns of the step's trees: one learner row each, however many branches share it."""
BRANCH_TURNS = "tree/branch_turns"
"""turns the step's episodes hold counting shared prefixes once per branch: the rows one row per branch would need."""
TREE_DIAGNOSTICS: tuple[str, ...] = (BRANCHES, STUDENT_TOKENS, FORKS, FORK_S, "credit/nonzero_turn_share")


def tree_metrics(played: Sequence[Trajectory], roots: RolloutStats, branches: RolloutStats) -> dict[str, float]:
    """The step's tree diagnostics."""
    kept = [t for t in played if not t.dropped]
    return {
        BRANCHES: float(sum(t.fork is not None for t in played)),
        STUDENT_TOKENS: float(roots.generated_tokens + branches.generated_tokens),
        FORKS: float(branches.forks),
        FORK_S: branches.fork_s,
        DISTINCT_TURNS: float(sum(turn.supervised for t in kept for turn in t.turns)),
        BRANCH_TURNS: float(sum(not turn.teacher for t in kept for turn in t.turns)),
    }
