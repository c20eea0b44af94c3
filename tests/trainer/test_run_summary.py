"""A run's summary from its metrics.jsonl: Peak, Final-5, nAUC, costs to a target and speedups, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.run_summary import speedups, summarize, write_summary


def records(success: dict[int, float], tokens_per_step: float, seconds_per_step: float) -> list[dict]:
    """Four update records and, for the evaluated steps, records of their own logged late (as the async driver)."""
    updates = [
        {"step": s, "learner/supervised_tokens": tokens_per_step, "learner/step_s": seconds_per_step}
        for s in range(1, 5)
    ]
    return updates + [{"step": s, "eval/success_rate": v} for s, v in success.items()]


def test_summary_reads_the_held_out_curve_in_step_order() -> None:
    run = summarize(records({2: 0.5, 4: 0.7}, 100.0, 2.0), target=0.6)
    assert (run["evaluations"], run["last_step"], run["peak"]) == (2, 4, 0.7)
    assert run["final5_mean"] == pytest.approx(0.6) and run["final5_sd"] == pytest.approx(0.1)
    assert run["nauc"] == pytest.approx(0.6)  # trapezoid from step 2 to 4
    assert (run["updates_to_target"], run["trained_tokens_to_target"], run["learner_s_to_target"]) == (4, 400, 8)
    assert summarize([], None)["peak"] is None


def test_speedups_are_baseline_cost_over_run_cost() -> None:
    fast = summarize(records({2: 0.7, 4: 0.7}, 50.0, 1.0), target=0.6)
    slow = summarize(records({2: 0.5, 4: 0.7}, 100.0, 2.0), target=0.6)
    never = summarize(records({2: 0.1, 4: 0.2}, 100.0, 2.0), target=0.6)
    assert speedups(fast, slow) == {"updates_speedup": 2.0, "trained_tokens_speedup": 4.0, "learner_s_speedup": 4.0}
    assert speedups(never, slow)["updates_speedup"] is None  # the paper's dash
    with pytest.raises(ValueError, match="same target"):
        speedups(fast, summarize(records({2: 0.7}, 1.0, 1.0), target=0.5))


def test_summary_file_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, rows in {"opd": records({2: 0.5, 4: 0.7}, 100.0, 2.0), "divopd": records({2: 0.7}, 50.0, 1.0)}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert json.loads(write_summary(tmp_path / "opd", 0.6).read_text())["updates_to_target"] == 4
    runs = [str(tmp_path / "opd"), str(tmp_path / "divopd")]
    assert main(["summary", *runs, "--target", "0.6", "--baseline", runs[0]]) == 0
    table = capsys.readouterr().out
    assert "| Tok. speedup | learner-time speedup |" in table
    assert table.splitlines()[-1].endswith("| 2 | 100 | 2 | 4.00 | 4.00 |")
    assert main(["summary", *runs, "--baseline", runs[0]]) == 2  # a speedup needs a target


def test_summary_averages_the_gradient_audit_over_the_audited_updates() -> None:
    from trainer.batching.divopd_stats import COSINE, PROJECTION

    audited = [{"step": 2, PROJECTION: 2.0, COSINE: 0.5}, {"step": 4, PROJECTION: 1.0, COSINE: 0.9}]
    run = summarize([*records({4: 0.5}, 1.0, 1.0), *audited])
    assert run["audit"] == {PROJECTION: pytest.approx(1.5), COSINE: pytest.approx(0.7)}  # Table 13's means
    assert summarize(records({4: 0.5}, 1.0, 1.0))["audit"] == {}
