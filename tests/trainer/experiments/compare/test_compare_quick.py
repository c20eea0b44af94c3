"""`trainer compare --quick` end to end over already-made models: atod-ablation's sync (ATOD), async (DivOPD,
checkpoint-evaluated) and branching (BranchOPD) drivers train, the report, plots and pages exist; atod-long's
learning-rate search picks each arm's rate, and a longer size continues the finished runs from their checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.cli import main
from trainer.experiments.compare import load_spec
from trainer.experiments.compare.run import arm_config
from trainer.metrics import read_metrics, run_time

ARMS = ["divopd", "branchopd", "atod"]  # in the config's order


def cheap_models(models: Path, comparison: str = "atod-ablation") -> None:
    """The comparison's SFT teacher and warm student, made with a few SFT steps (compare reuses them as is)."""
    from trainer.quickstart.models import expert_episodes, make_models, sft_from_expert
    from trainer.rollout.local_server import LocalServer

    spec = load_spec(comparison)
    settings = arm_config(spec, spec.arms[0], 0, models, models, "local").env.server_settings
    with LocalServer(spec.env, settings=settings) as server:
        config = arm_config(spec, spec.arms[0], 0, models, models, server.address)
        episodes = expert_episodes(config, server.address, 16)
    tiny = make_models(config, episodes, models)
    sft_from_expert(config, episodes, tiny.teacher, steps=20, out_dir=models / "teacher-sft")
    sft_from_expert(config, episodes, tiny.student, steps=10, out_dir=models / "student-warm")


@pytest.mark.slow
def test_quick_atod_ablation_writes_report(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    models, out = tmp_path / "models", tmp_path / "compare"
    cheap_models(models)
    argv = ["compare", "--config", "atod-ablation", "--quick", "--out", str(out), "--models", str(models)]
    assert main([*argv, "--arms", ",".join(ARMS)]) == 0
    report = (out / "report.md").read_text()
    record = json.loads((out / "runs.json").read_text())
    runs = record["runs"]
    assert [r["arm"] for r in runs] == ARMS  # --quick: one seed
    made = record["baselines"]["models"]
    assert made["reused"] and made["teacher-sft"]["key"]["steps"] == 20
    for run in runs:
        assert run["steps"] == [0, 2] and run["student_tokens"][-1] > 0
    assert all(run["teacher_tokens"] > 0 for run in runs)  # the async (DivOPD) arm's too
    for arm in ARMS:
        assert f"| {arm} |" in report
        assert (out / "runs" / arm / "seed0" / "episodes" / "step_000002.html").is_file()
    assert "NARROWED: 3 of 9 arms" in report and "20 SFT steps" in report
    assert "ATOD > tdur=none" not in report and "BranchOPD >= OPD" not in report  # claims need both arms
    assert "teacher" in report and "student" in report and "82.81" in report
    for png in ("success-vs-steps.png", "success-vs-tokens.png", "episodes-teacher.html", "episodes-student.html"):
        assert (out / png).stat().st_size > 1000


@pytest.mark.slow
def test_quick_long_comparison_searches_learning_rates_then_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("alfworld")
    models, out = tmp_path / "models", tmp_path / "compare"
    cheap_models(models, "atod-long")
    spec = load_spec("atod-long")
    short = tmp_path / "atod-long-short.yaml"  # atod-long's arms, search and budget; 3-turn episodes (CI time)
    short.write_text(f"extends: atod-long\ncommon: {json.dumps([*spec.common, 'env.max_turns=3'])}\n")
    argv = ["compare", "--config", str(short), "--quick", "--out", str(out), "--models", str(models)]
    assert main([*argv, "--arms", "opd,atod"]) == 0
    search = json.loads((out / "lr-search.json").read_text())
    assert [r["arm"] for r in search["results"]] == ["opd", "atod"]
    assert sorted((r["arm"], r["lr"]) for r in search["runs"]) == sorted(
        (arm, lr) for arm in ("opd", "atod") for lr in spec.lr_values
    )
    for result in search["results"]:  # every arm the same values; its long run at the chosen one
        assert sorted(float(lr) for lr in result["scores"]) == list(spec.lr_values)
        config = json.loads((out / "runs" / result["arm"] / "seed0" / "config.json").read_text())
        assert config["optim"]["lr"] == result["chosen"] and config["env"]["eval_split"] == "valid_seen"
    for run in search["runs"]:
        assert run["steps"] == [0, 2]
    assert [r["steps"] for r in json.loads((out / "runs.json").read_text())["runs"]] == [[0, 2, 4]] * 2
    first = {arm: run_time(read_metrics(out / "runs" / arm / "seed0" / "metrics.jsonl")) for arm in ("opd", "atod")}
    capsys.readouterr()
    out = out.rename(tmp_path / "moved")  # a moved comparison keeps its runs
    argv[argv.index("--out") + 1] = str(out)
    assert main([*argv, "--arms", "opd,atod", "--size", "steps=6"]) == 0  # longer: the same runs continue
    printed = capsys.readouterr().out
    assert printed.count("compare: reusing the finished run") == 2 * len(spec.lr_values)  # the search is kept
    for arm in ("opd", "atod"):
        assert f"compare: continuing {out / 'runs' / arm / 'seed0'} from step 4" in printed
        metrics = (out / "runs" / arm / "seed0" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in metrics] == [1, 2, 3, 4, 5, 6]  # nothing trained twice
    continued_runs = json.loads((out / "runs.json").read_text())["runs"]
    assert [r["steps"] for r in continued_runs] == [[0, 2, 4, 6]] * 2
    for run in continued_runs:  # its wall time: the first attempt's training to step 4, then the second attempt's
        total = run_time(read_metrics(out / "runs" / run["arm"] / "seed0" / "metrics.jsonl"))
        assert run["wall_s"] >= total > first[run["arm"]] > 0
    report = (out / "report.md").read_text()
    assert "NARROWED: steps=6, 2 of 4 arms" in report and "## Learning-rate search" in report


@pytest.mark.slow
def test_quick_suite_runs_every_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("alfworld")
    monkeypatch.chdir(tmp_path)  # each comparison's models in its config's default folder (runs/models...)
    members = ["atod-ablation", "atod-ablation-searchqa"]
    for member in members:
        cheap_models(Path(load_spec(member).models), member)
    assert main(["compare", "--config", "atod-ablation-all", "--quick", "--arms", "atod", "--out", "suite"]) == 0
    for member in members:
        [run] = json.loads((tmp_path / "suite" / member / "runs.json").read_text())["runs"]
        assert run["steps"] == [0, 2] and run["student_tokens"][-1] > 0 and run["teacher_tokens"] > 0
        report = (tmp_path / "suite" / member / "report.md").read_text()
        assert f"**{load_spec(member).env}**" in report and "| atod | 1 |" in report
        assert (tmp_path / "suite" / member / "runs" / "atod" / "seed0" / "episodes" / "step_000002.html").is_file()
    summary = (tmp_path / "suite" / "report.md").read_text()
    row = next(line for line in summary.splitlines() if line.startswith("| atod |"))
    assert row.count("±") == 2 and "82.81" in row and "42.33" in row
    assert "[searchqa](atod-ablation-searchqa/report.md)" in summary


@pytest.mark.slow
def test_quick_webshop_comparison(tmp_path: Path) -> None:
    models, out = tmp_path / "models", tmp_path / "compare"
    cheap_models(models, "atod-ablation-webshop")
    argv = ["compare", "--config", "atod-ablation-webshop", "--quick", "--out", str(out), "--models", str(models)]
    assert main([*argv, "--arms", "opd"]) == 0
    [run] = json.loads((out / "runs.json").read_text())["runs"]
    assert run["steps"] == [0, 2] and run["student_tokens"][-1] > 0 and run["teacher_tokens"] > 0
    report = (out / "report.md").read_text()
    assert "**webshop**" in report and "85.16" in report and "| opd | 1 |" in report


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_quick_ladder_comparison_trains_atod_with_tdur_on_the_listed_turns(tmp_path: Path) -> None:
    """atod-ladder (docs/design/046) on the shipped ladder models, nothing made: ATOD's listed turns carry T-DUR
    weights (their mean below 1), the report names the ladder."""
    pytest.importorskip("alfworld")
    out = tmp_path / "compare"
    short = tmp_path / "atod-ladder-short.yaml"  # atod-ladder; 6-turn episodes, no search (CI time)
    common = [*load_spec("atod-ladder").common, "env.max_turns=6"]
    short.write_text(f"extends: atod-ladder\nlr_values: []\ncommon: {json.dumps(common)}\n")
    argv = ["compare", "--config", str(short), "--quick", "--out", str(out), "--models", str(tmp_path / "none")]
    assert main([*argv, "--arms", "atod", "--size", "steps=2", "--size", "eval_every=2"]) == 0
    [run] = json.loads((out / "runs.json").read_text())["runs"]
    assert run["steps"] == [0, 2] and run["teacher_tokens"] > 0
    metrics = [
        json.loads(line) for line in (out / "runs" / "atod" / "seed0" / "metrics.jsonl").read_text().splitlines()
    ]
    weights = [m["opd/listed_turn_weight"] for m in metrics if "opd/listed_turn_weight" in m]
    assert len(weights) == 2 and all(0 < w < 1 for w in weights)
    report = (out / "report.md").read_text()
    assert "the alfworld model ladder's" in report and "teacher 128 x 2; student 64 x 2" in report
