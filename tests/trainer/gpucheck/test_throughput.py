"""The throughput stage's time plan: each size's parts in order, their deadlines adding up to the stage's time,
and on the H200 every part given more than the least a part starts with."""

from __future__ import annotations

import pytest

from trainer.gpucheck.__main__ import STAGES
from trainer.gpucheck.throughput import MARGIN_S, MIN_PART_S, schedule


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_parts_share_out_the_stage_time(device: str) -> None:
    budget = next(s for s in STAGES if s.name == "throughput").budget_s
    plan = schedule(device, budget - MARGIN_S)
    sizes = ["Qwen3-1.7B", "Qwen3-4B"] if device == "cuda" else ["tiny"]
    assert [(size, part) for size, part, _ in plan] == [(s, p) for s in sizes for p in ("learner", "generation")]
    deadlines = [until for _, _, until in plan]
    assert deadlines == sorted(deadlines) and deadlines[-1] == pytest.approx(budget - MARGIN_S)
    shares = [b - a for a, b in zip([0.0, *deadlines], deadlines, strict=False)]
    assert min(shares) >= MIN_PART_S[device]
