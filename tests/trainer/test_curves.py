"""Curve summaries as the DivOPD paper reports them: Peak, Final-5, nAUC, cost to a target, speedup, flattening."""

from __future__ import annotations

import pytest

from trainer import curves

STEPS = [0, 10, 20, 30, 40, 50, 60]
SUCCESS = [0.9, 0.2, 0.5, 0.4, 0.6, 0.6, 0.5]
"""A start (step 0, not a checkpoint: its 0.9 must never count) and six checkpoints."""


def test_peak_and_final_five_use_checkpoints_only() -> None:
    assert curves.peak(STEPS, SUCCESS) == 0.6
    mean, sd = curves.final_n(STEPS, SUCCESS) or (0.0, 0.0)
    assert mean == pytest.approx(0.52) and sd == pytest.approx(0.0748, abs=1e-4)  # last five: .5 .4 .6 .6 .5
    assert curves.final_n([0, 10], [0.1, 0.3]) == (0.3, 0.0)
    assert curves.peak([0], [0.5]) is None and curves.final_n([0], [0.5]) is None
    with pytest.raises(ValueError, match="2 steps but 1"):
        curves.peak([0, 1], [0.5])


def test_nauc_is_the_trapezoid_area_over_the_horizon() -> None:
    assert curves.nauc([0, 10], [0.0, 1.0]) == pytest.approx(0.5)
    assert curves.nauc([0, 10, 20], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert curves.nauc([0, 10, 20], [0.0, 1.0, 1.0], horizon=10) == pytest.approx(0.5)  # cut at the horizon
    assert curves.nauc([0, 10], [0.0, 1.0], horizon=20) == pytest.approx(0.75)  # flat after the last evaluation
    assert curves.nauc([0], [0.3]) is None


def test_cost_to_target_and_speedup() -> None:
    tokens = [0, 100, 200, 300, 400, 500, 600]
    assert curves.cost_to_target(STEPS, SUCCESS, tokens, 0.5) == 200  # first checkpoint >= 0.5 (not the start)
    assert curves.cost_to_target(STEPS, SUCCESS, tokens, 0.7) is None
    assert curves.speedup(400.0, 200.0) == 2.0
    assert curves.speedup(None, 200.0) is None and curves.speedup(400.0, None) is None


def test_saturation_is_where_the_running_mean_reaches_the_plateau() -> None:
    rising = [0, 16, 32, 48, 64, 80, 96, 112, 128]
    values = [0.0, 0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4]  # Final-5 = 0.4
    # at 64 the running mean (.2+.3+.4)/3 = .3 < .4 - .05; at 80 (.3+.4+.4)/3 = .367 >= .35
    assert curves.saturation_step(rising, values, tolerance=0.05) == 80
    assert curves.saturation_step(rising, values, tolerance=0.1) == 64  # (.2+.3+.4)/3 = .3 >= .3
    assert curves.saturation_step([0], [0.2], tolerance=0.1) is None
