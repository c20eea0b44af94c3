"""BranchOPD's behaviour diagnostics on hand-built mains and branches: observation disagreement, new actions
per branch, the first changed action's offset, the low-likelihood rate, and the environment-step cost."""

from __future__ import annotations

import pytest

from trainer.branching.diagnostics import (
    ENV_STEP_RATIO,
    ENV_STEPS,
    FIRST_CHANGE_TOKENS,
    LOW_LIKELIHOOD_RATE,
    NEW_ACTIONS,
    OBS_DISAGREEMENT,
    REPLAY_STEPS,
    branch_metrics,
)
from trainer.rollout.types import Trajectory, Turn


def turn(action: str, observation: str, tokens: int, logp: float = -0.1, start: int = 0) -> Turn:
    return Turn(
        prompt_ids=[1],
        response_ids=list(range(tokens)),
        logp_old=[logp] * tokens,
        response_text=action,
        action=action,
        observation=observation,
        supervise_from=start,
    )


def test_behaviour_and_cost_diagnostics() -> None:
    # main: 3 turns of 40 tokens (120 generated: one whole 64-token on-policy window at mean -0.1)
    main = Trajectory(
        "t", 0, 0, turns=[turn("go a", "at a", 40), turn("take x", "got x", 40), turn("go b", "at b", 40)]
    )
    # branch 1 forks in turn 1 at offset 10: same action there, then a new action in turn 2 (a changed action,
    # new to the main, another observation): 30 + 40 tokens from the fork to the end of turn 2
    same = turn("go a", "at a", 40, start=40)
    one = Trajectory("t", 0, 0, turns=[same, turn("take x", "got x", 40, start=10), turn("open c", "c open", 40)])
    one.fork = (1, 10)
    # branch 2 forks at turn 2 offset 0, repeats the main exactly, but its student was unsure: a low-likelihood
    # suffix (mean -3 over its first 64 tokens: 40 tokens of the fork turn and 24 of the next)
    copied = [turn("go a", "at a", 40, start=40), turn("take x", "got x", 40, start=40)]
    two = Trajectory("t", 0, 0, turns=[*copied, turn("go b", "at b", 40, logp=-3.0), turn("wait", "nothing", 40, -3.0)])
    two.fork = (2, 0)
    metrics = branch_metrics([main], [one, two])
    assert metrics[OBS_DISAGREEMENT] == pytest.approx(1.0)  # one's turn-2 observation; two has a 4th turn
    assert metrics[NEW_ACTIONS] == pytest.approx((1 + 1) / 2)  # "open c"; "wait"
    assert metrics[FIRST_CHANGE_TOKENS] == pytest.approx(((30 + 40) + (40 + 40)) / 2)  # two changes at turn 3
    assert metrics[LOW_LIKELIHOOD_RATE] == pytest.approx(0.5)  # two's suffix is below every on-policy window
    assert metrics[ENV_STEPS] == (3 - 1) + (4 - 2) and metrics[REPLAY_STEPS] == 1 + 2
    assert metrics[ENV_STEP_RATIO] == pytest.approx((3 + 4 + 3) / 3)
