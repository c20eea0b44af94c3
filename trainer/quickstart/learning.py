"""Did the quickstart's training learn beyond noise? A paired bootstrap over the held-out tasks.

Every policy is evaluated on the same held-out tasks (same environment seeds), so the gain of the
trained student over its start is a per-task difference. Resampling the tasks with replacement
(`BOOTSTRAP_RESAMPLES` times, fixed seed) gives the gain's spread: `spread` is 1.96 bootstrap
standard deviations (the half-width of a normal 95 % interval). Learning is shown when the gain
exceeds its spread and the teacher-student success gap is smaller after training than before.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
Z_95 = 1.96


@dataclass(frozen=True)
class LearningCheck:
    """The quickstart's learning criterion, measured."""

    gain: float
    """Held-out success after training minus before (mean over tasks)."""
    spread: float
    """1.96 x the bootstrap standard deviation of `gain` (resampling tasks)."""
    gap_before: float
    """Teacher success minus the student's before training."""
    gap_after: float
    """Teacher success minus the student's after training."""
    tasks: int

    @property
    def beyond_noise(self) -> bool:
        """The gain exceeds its spread."""
        return self.gain > self.spread

    @property
    def gap_shrank(self) -> bool:
        """The teacher-student gap is smaller after training."""
        return self.gap_after < self.gap_before

    @property
    def gap_closed(self) -> float:
        """The share of the teacher-student gap that training closed (negative: it widened; 0 without a gap)."""
        return (self.gap_before - self.gap_after) / self.gap_before if self.gap_before > 0 else 0.0

    @property
    def met(self) -> bool:
        """Both: learning beyond noise, towards the teacher."""
        return self.beyond_noise and self.gap_shrank


def paired_bootstrap_sd(before: Sequence[float], after: Sequence[float]) -> float:
    """Bootstrap standard deviation of mean(after - before), resampling the paired tasks."""
    if len(before) != len(after) or not before:
        raise ValueError(f"need the same non-empty task list before and after ({len(before)} vs {len(after)} tasks)")
    differences = [a - b for a, b in zip(after, before, strict=True)]
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(differences)
    means = [sum(rng.choices(differences, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES)]
    return statistics.pstdev(means)


def check_learning(before: Sequence[float], after: Sequence[float], teacher: Sequence[float]) -> LearningCheck:
    """The criterion from per-task success of the student before and after training and of the teacher."""
    mean = statistics.fmean
    return LearningCheck(
        gain=mean(after) - mean(before),
        spread=Z_95 * paired_bootstrap_sd(before, after),
        gap_before=mean(teacher) - mean(before),
        gap_after=mean(teacher) - mean(after),
        tasks=len(before),
    )
