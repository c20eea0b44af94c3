"""The quickstart's learning criterion (paired bootstrap over held-out tasks) and its phase lines."""

from __future__ import annotations

import io
import math

import pytest

from trainer.progress import Phases
from trainer.quickstart.learning import Z_95, check_learning, paired_bootstrap_sd


def test_no_change_is_no_learning() -> None:
    same = [0.0, 0.5, 1.0, 0.0]
    check = check_learning(same, same, [1.0] * 4)
    assert check.gain == 0 and check.spread == 0 and not check.beyond_noise and not check.met


def test_a_gain_on_every_task_is_beyond_noise_and_closes_the_gap() -> None:
    check = check_learning([0.0] * 8, [0.5] * 8, [1.0] * 8)
    assert check.gain == 0.5 and check.spread == 0 and check.beyond_noise
    assert (check.gap_before, check.gap_after) == (1.0, 0.5) and check.gap_shrank and check.met
    assert check.gap_closed == 0.5
    assert check_learning([1.0] * 8, [1.0] * 8, [0.5] * 8).gap_closed == 0  # no gap to close


def test_one_lucky_task_is_not_beyond_noise() -> None:
    check = check_learning([0.0] * 16, [1.0] + [0.0] * 15, [0.5] * 16)
    assert check.gain == pytest.approx(1 / 16) and check.spread > check.gain and not check.met


def test_bootstrap_sd_matches_the_standard_error() -> None:
    before = [0.0] * 40
    after = [1.0, 0.0] * 20  # differences: sd 0.5, so the mean's standard error is 0.5 / sqrt(40)
    assert paired_bootstrap_sd(before, after) == pytest.approx(0.5 / math.sqrt(40), rel=0.1)
    assert check_learning(before, after, [1.0] * 40).spread == pytest.approx(Z_95 * 0.5 / math.sqrt(40), rel=0.1)
    with pytest.raises(ValueError, match="same non-empty task list"):
        paired_bootstrap_sd([0.0], [0.0, 1.0])


def test_phases_number_each_phase_name_its_folder_and_time_it() -> None:
    stream = io.StringIO()
    phases = Phases(2, stream)
    phases.start("a", "first thing", "runs/a")
    phases.start("b", "second thing")
    phases.end("3 won")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[1/2] first thing -> runs/a" and lines[1].startswith("[1/2] done in ")
    assert lines[2] == "[2/2] second thing" and lines[3].startswith("[2/2] done in ") and lines[3].endswith(": 3 won")
    assert set(phases.seconds) == {"a", "b"}
    phases.end()  # nothing running: nothing printed
    assert len(stream.getvalue().splitlines()) == 4
