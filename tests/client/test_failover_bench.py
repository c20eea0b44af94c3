"""`envhub bench --profile failover` end to end, small (slow: ALFWorld replicas started 4 times): every
kill moves the killed replica's half of the sessions and every result equals an undisturbed twin's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envhub.bench.failover import FailoverBenchSettings, run_failover_bench

pytestmark = pytest.mark.slow


def test_the_failover_bench_moves_the_killed_half_and_changes_no_result(tmp_path: Path) -> None:
    result = run_failover_bench(
        FailoverBenchSettings("alfworld", str(tmp_path), sessions=16, turns=4, kills=1, replay_bounds=(6,))
    )

    for mode in ("recovery", "recovery_warm", "recovery_unbatched", "recovery_serial", "recovery_replay_log"):
        run = result[mode]
        assert run["sessions_on_killed_replica"] == 8, "placement spreads the two groups over both replicas"
        assert run["results_equal_undisturbed"] is True
        [kill] = run["runs"]
        assert kill["recoveries"] == 8
        assert 0 < sum(kill["phases_s"].values()) <= kill["stepping_again_s"]
    assert set(result["restores_alone_s"]) == {"batched", "one call each"}
    assert result["recovery_replay_log"]["steps_to_replay"] == 5, "killed one step before its snapshots were due"
    assert set(result["overhead_turn_s"]) == {"plain pool", "failover k=1", "failover k=2", "failover k=4"}
    [replay_log] = result["replay_log_overhead"]
    assert (replay_log["bound"], replay_log["rounds"]) == (6, 6), "one round of snapshots paid"
    assert replay_log["ratio_mean"] > 0
    assert json.loads((tmp_path / "envhub-failover-recovery.json").read_text())["sessions"] == 16
    assert (
        "| batched restores (concurrency 32), cold | 1 | 8 |" in (tmp_path / "envhub-failover-recovery.md").read_text()
    )


def test_recovery_only_times_the_batched_kills_alone(tmp_path: Path) -> None:
    result = run_failover_bench(
        FailoverBenchSettings("alfworld", str(tmp_path), sessions=16, kills=1, replay_bounds=(6,), recovery_only=True)
    )

    assert {name for name in result if name.startswith("recovery")} == {"recovery", "recovery_warm"}
    assert result["overhead_turn_s"] == {} and result["replay_log_overhead"] == []
    for mode in ("recovery", "recovery_warm"):
        [kill] = result[mode]["runs"]
        assert kill["results_equal_undisturbed"] is True and kill["recoveries"] == 8
        assert kill["steps_to_replay"] == 1, "every turn's snapshots settled before the next: one step to replay"
    assert result["every_kill_within_target"] == all(
        result[mode]["runs"][0]["stepping_again_s"] <= 3.0 for mode in ("recovery", "recovery_warm")
    )
    table = (tmp_path / "envhub-failover-recovery.md").read_text()
    assert "| batched restores (concurrency 32), warm | 1 | 8 |" in table
