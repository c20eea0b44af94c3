"""`envhub bench --profile ready`'s cold generation part on real ALFWorld games: the games count reaches every run,
made by 1 and by 2 processes in turn (slow: four cold `prepare` runs)."""

from __future__ import annotations

import pytest

from envhub.bench.ready import ReadyBenchSettings, _generation

pytestmark = pytest.mark.slow


def test_cold_generation_makes_the_asked_games_with_one_and_two_processes() -> None:
    result = _generation(ReadyBenchSettings(games=2, repeats=2))

    assert [run["workers"] for run in result["runs"]] == [1, 2, 2, 1], "interleaved, the order turned each repeat"
    assert all(run["games"] == 2 and run["seconds"] > 0 for run in result["runs"])
    assert result["speedup_2_over_1"] == result["median_s"]["1"] / result["median_s"]["2"]
