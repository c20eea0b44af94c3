"""Learning-rate schedules shared by the learner (`optim.lr_schedule`) and SFT (`sft_train`'s `schedule`)."""

from __future__ import annotations

import math
from typing import Literal

LrSchedule = Literal["constant", "cosine"]
"""constant: the peak rate after any warm-up; cosine: after the warm-up, a half cosine down to a final share."""


def lr_factor(schedule: LrSchedule, done: int, steps: int, *, warmup: int = 0, final: float = 0.0) -> float:
    """Multiplier of the peak learning rate for update `done + 1` of `steps`: linear warm-up over the first
    `warmup` updates (0: none), then 1 (constant) or a half cosine from 1 down to `final` at update `steps`, the last
    (cosine)."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; known: constant, cosine")
    if done < warmup:
        return (done + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (done - warmup) / max(1, steps - 1 - warmup))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))
