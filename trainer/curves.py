"""Summaries of a held-out success curve as the DivOPD paper reports them (Table 1, Table 2, Table 7).

A curve is the held-out success after each evaluated learner step, `steps[i] -> success[i]`; when `steps[0]` is
0 that point is the policy before training (Table 5's initial SR), which is not a checkpoint of the run.
* Peak: the best checkpoint's success ("Peak SR is the best checkpoint", Table 7).
* Final-5: mean and standard deviation over the last five evaluation checkpoints (Table 7).
* nAUC@N: the area under the curve over the first N learner updates divided by N (Table 2's nAUC@150),
  trapezoidal between evaluations, starting from the initial success at step 0.
* Cost to a target tau: the cumulative cost (updates, tokens, seconds) at the first checkpoint whose success
  reaches tau; the paper's speedup is C_vanilla(tau) / C_method(tau) (Table 1's Tok./GPU columns).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

FINAL_N = 5


def checkpoints(steps: Sequence[int], success: Sequence[float]) -> list[tuple[int, float]]:
    """The (step, success) points of trained checkpoints (the untrained start at step 0 left out)."""
    if len(steps) != len(success):
        raise ValueError(f"{len(steps)} steps but {len(success)} success values")
    return [(step, value) for step, value in zip(steps, success, strict=True) if step > 0]


def peak(steps: Sequence[int], success: Sequence[float]) -> float | None:
    """The best checkpoint's success (None before the first checkpoint)."""
    points = checkpoints(steps, success)
    return max(value for _, value in points) if points else None


def final_n(steps: Sequence[int], success: Sequence[float], n: int = FINAL_N) -> tuple[float, float] | None:
    """Mean and population standard deviation over the last `n` checkpoints (fewer when the run has fewer)."""
    values = [value for _, value in checkpoints(steps, success)][-n:]
    if not values:
        return None
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def nauc(steps: Sequence[int], success: Sequence[float], horizon: int | None = None) -> float | None:
    """Area under the success curve over [first step, horizon] divided by the span (trapezoids; the curve is cut
    at `horizon`, default its last step, and needs a point at or before it). None with fewer than 2 points."""
    if len(steps) != len(success):
        raise ValueError(f"{len(steps)} steps but {len(success)} success values")
    if not steps:
        return None
    end = steps[-1] if horizon is None else horizon
    points = [(s, v) for s, v in zip(steps, success, strict=True) if s <= end]
    if len(points) < 2 or end <= points[0][0]:
        return None
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in itertools.pairwise(points))
    last_step, last_value = points[-1]
    area += (end - last_step) * last_value  # flat beyond the last evaluation up to the horizon
    return area / (end - points[0][0])


def first_reaching(steps: Sequence[int], values: Sequence[float], target: float) -> int | None:
    """Index of the first checkpoint whose success is at least `target` (None: never reached)."""
    for index, (step, value) in enumerate(zip(steps, values, strict=True)):
        if step > 0 and value >= target - 1e-12:
            return index
    return None


def cost_to_target(
    steps: Sequence[int], success: Sequence[float], cumulative_cost: Sequence[float], target: float
) -> float | None:
    """The cumulative cost (aligned with `steps`) at the first checkpoint reaching `target` (None: not reached)."""
    index = first_reaching(steps, success, target)
    return None if index is None else cumulative_cost[index]


def speedup(baseline_cost: float | None, method_cost: float | None) -> float | None:
    """C_baseline(tau) / C_method(tau); None when either did not reach tau (the paper's dash)."""
    if baseline_cost is None or method_cost is None or method_cost <= 0:
        return None
    return baseline_cost / method_cost


def saturation_step(steps: Sequence[int], success: Sequence[float], tolerance: float) -> int | None:
    """Where the curve flattens: the first checkpoint step whose running mean over it and the two checkpoints
    before it reaches the Final-5 mean minus `tolerance` (e.g. one held-out task); None without checkpoints."""
    points = checkpoints(steps, success)
    final = final_n(steps, success)
    if final is None:
        return None
    values = [value for _, value in points]
    for index, (step, _) in enumerate(points):
        window = values[max(index - 2, 0) : index + 1]
        if statistics.fmean(window) >= final[0] - tolerance - 1e-12:
            return step
    return points[-1][0]
