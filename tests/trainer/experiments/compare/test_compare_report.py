"""The comparison report from given curves: table, claim verdicts against the seed spread, starts, plots."""

from __future__ import annotations

import re
from pathlib import Path

from trainer.eval import EvalResult
from trainer.experiments.compare import load_spec
from trainer.experiments.compare.report import write_report
from trainer.experiments.compare.run import ArmRun, Baselines, Measured

FINAL = {"atod": (0.50, 0.60), "grpo": (0.10, 0.20), "opd": (0.40, 0.60), "divopd": (0.30, 0.30)}
"""Final held-out success per arm for seeds 0 and 1."""


LADDER_SPEC = {"teacher": {"hidden": 128, "layers": 2}, "student": {"hidden": 64, "layers": 2}}


def run(arm: str, seed: int) -> ArmRun:
    final = FINAL[arm][seed]
    teacher = None if arm == "divopd" else 0.0 if arm == "grpo" else 1234.0
    return ArmRun(arm, seed, [0, 2, 4], [0.0, final / 2, final], [15.0, 14.0, 13.0], [0, 500, 1000], teacher, 60.0)


def sft(steps: int, match: float) -> dict[str, object]:
    return {"key": {"steps": steps, "examples": 100}, "result": {"exact_match_after": match}}


def test_report_checks_claims_against_the_seed_spread(tmp_path: Path) -> None:
    spec = load_spec("atod-ablation").sized(False, {"steps": 4, "eval_every": 2}, arms=list(FINAL))
    baselines = Baselines(
        student=EvalResult("s", "valid_seen", 16, 0.06, 14.8, 0.01, 5.0),
        teacher=EvalResult("t", "valid_seen", 16, 0.38, 12.0, 0.0, 5.0),
        models={"teacher-sft": sft(1500, 0.67), "student-warm": sft(600, 0.40), "reused": True},
    )
    machine = {"wall_s": 600.0, "cpus": 2, "load_start": (1.0, 2.0, 3.0), "load_end": (4.0, 5.0, 6.0)}
    runs = [run(arm, seed) for seed in (0, 1) for arm in FINAL]
    measured = Measured(baselines, runs, machine, [], None)
    text = write_report(spec, measured, tmp_path, "default size, NARROWED: steps=4").read_text()
    assert "(default size, NARROWED: steps=4)" in text
    assert "**teacher 0.38**" in text and "**student 0.06**" in text and "clearly above" in text
    assert "1500 SFT steps" in text and "reused from the models folder" in text
    assert "| atod | 2 | 0.55 ± 0.05 |" in text and "| grpo | 2 | 0.15 ± 0.05 |" in text
    assert "| divopd | 2 | 0.30 ± 0.00 | 13.0 ± 0.0 | 1,000 | not logged (async driver) |" in text
    lines = {line.split(" |")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.55 vs 0.15 (+0.40, spread 0.07): holds" in lines["ATOD > GRPO (ATOD Table 1)"]
    assert "0.55 vs 0.50 (+0.05, spread 0.11): same sign, within spread" in lines["ATOD > OPD (ATOD Table 1)"]
    divopd = "DivOPD sampler >= arrival-order OPD (DivOPD Table 1; lockstep, low load)"
    assert "0.30 vs 0.50 (-0.20, spread 0.10): does NOT hold" in lines[divopd]
    assert "T-DUR" not in text  # a claim is checked only when both of its arms ran
    assert "optim.lr = 0.001; learning-rate search budget per arm: 1 value" in text
    # curve summaries: Peak = best checkpoint, Final-5 over the 2 checkpoints, nAUC@4 (trapezoids from step 0)
    assert "| atod | 2 | 0.55 ± 0.05 | 0.41 ± 0.04 | 0.28 ± 0.02 | 4 |" in text
    assert "the whole comparison: 10.0 min on 2 CPUs" in text and "1.0, 2.0, 3.0" in text
    for png in ("success-vs-steps.png", "success-vs-tokens.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_report_of_a_stopped_comparison_marks_single_seeds(tmp_path: Path) -> None:
    spec = load_spec("atod-ablation").sized(False, {"steps": 4, "eval_every": 2}, arms=["atod", "grpo", "opd"])
    baselines = Baselines(
        student=EvalResult("s", "valid_seen", 16, 0.06, 14.8, 0.01, 5.0),
        teacher=EvalResult("t", "valid_seen", 16, 0.38, 12.0, 0.0, 5.0),
        models={"teacher-sft": sft(1500, 0.67), "student-warm": sft(600, 0.40), "reused": True},
    )
    machine = {"wall_s": 60.0, "cpus": 2, "load_start": (1.0, 1.0, 1.0), "load_end": (1.0, 1.0, 1.0)}
    runs = [run("atod", 0), run("atod", 1), run("grpo", 0)]  # opd never ran, grpo one seed
    text = write_report(spec, Measured(baselines, runs, machine, [], None), tmp_path, "default size").read_text()
    assert "| opd | 0 | not run |" in text and "| grpo | 1 | 0.10 ± 0.00 |" in text
    assert "a > b on one seed (no spread)" in text and "ATOD > OPD" not in text


def test_a_finished_run_is_reused_only_under_the_same_settings(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict, replace

    from trainer.experiments.compare.run import RUN_RECORD, arm_config, finished_run

    spec = load_spec("atod-ablation")
    arm = spec.arms[0]
    config = arm_config(spec, arm, 0, tmp_path, Path("models"), "127.0.0.1:1")
    assert finished_run(config) is None
    out = Path(config.output_dir)
    out.mkdir(parents=True)
    record = {"config": config.model_dump(mode="json"), "run": asdict(run("grpo", 0))}
    (out / RUN_RECORD).write_text(json.dumps(record))
    steps = [{"step": 1, "rollout/generated_tokens": 250.0, "teacher/tokens_scored": 100.0}]
    steps += [{"step": 2, "rollout/generated_tokens": 250.0}]
    steps += [{"step": 3, "branch/student_tokens": 250.0, "teacher/tokens_scored": 50.0}]  # branching
    steps += [{"step": 4, "branch/student_tokens": 250.0}]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    other_port = arm_config(spec, arm, 0, tmp_path, Path("models"), "127.0.0.1:2")
    recounted = replace(run("grpo", 0), teacher_token_curve=[0.0, 100.0, 150.0])  # recorded before the curve existed
    assert finished_run(other_port) == recounted  # a new server's address is not a new setting; tokens recounted
    kept_fewer = config.model_copy(update={"checkpoint_keep": 1})
    assert finished_run(kept_fewer) == recounted  # nor is how many checkpoints stay on disk
    longer = arm_config(spec.sized(False, {"steps": 16}), arm, 0, tmp_path, Path("models"), "127.0.0.1:1")
    assert finished_run(longer) is None
    older = {**record["config"], "eval": {k: v for k, v in record["config"]["eval"].items() if k != "at_start"}}
    (out / RUN_RECORD).write_text(json.dumps({**record, "config": older}))
    assert finished_run(config) == recounted  # recorded before eval.at_start existed: its default, reused
    (out / RUN_RECORD).write_text(json.dumps({**record, "config": {**older, "no_such_field": 1}}))
    assert finished_run(config) is None


def test_comparisons_side_by_side_wait_for_the_shared_baselines_and_reuse_them(tmp_path: Path) -> None:
    import json
    import threading
    from dataclasses import asdict

    from trainer.experiments.compare.run import BASELINES, arm_config, folder_lock, shared_baselines

    spec = load_spec("atod-long")
    held_out = arm_config(spec, spec.arms[0], 0, tmp_path, Path("models"), "127.0.0.1:1")
    info = {"teacher-sft": sft(1500, 0.7), "student-warm": sft(600, 0.4), "reused": True}
    student = EvalResult("s", "valid_seen", 32, 0.0, 15.0, 0.0, 1.0)
    teacher = EvalResult("t", "valid_seen", 32, 0.5, 11.0, 0.0, 1.0)
    got: list[Baselines] = []
    with folder_lock(tmp_path):  # another comparison is making them
        waiting = threading.Thread(target=lambda: got.append(shared_baselines(held_out, info, "x", tmp_path)))
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not got  # it waits (evaluating here would fail: no server at 127.0.0.1:1)
        env = held_out.env.model_dump(mode="json", exclude={"targets"})
        key = {"eval": held_out.eval.model_dump(mode="json"), "env": env, "models": info}
        record = {"key": key, "student": asdict(student), "teacher": asdict(teacher)}
        (tmp_path / BASELINES).write_text(json.dumps(record))
    waiting.join(timeout=30.0)
    (reused,) = got  # the other's record, nothing evaluated
    assert (reused.student.policy, reused.teacher.success_rate, reused.models) == ("s", 0.5, info)


def test_report_gives_the_cost_to_target_and_the_speedups(tmp_path: Path) -> None:
    """DivOPD Table 1's measures from each run's metrics: the seeds reaching the target, the mean costs to it over
    those, and the geometric mean of the per-seed speed-ups over the baseline arm."""
    import json
    from dataclasses import replace

    import pytest

    from trainer.config import ConfigError

    sized = load_spec("divopd-ladder").sized(False, {"steps": 4, "eval_every": 2, "seeds": 2})
    spec = replace(sized, target=0.5)  # divopd-ladder's speed-ups over opd-async, at a target set here
    curves = {  # (arm, seed): success at steps 2 and 4, learner seconds a step
        ("opd-async", 0): ([0.3, 0.5], 2.0),
        ("opd-async", 1): ([0.3, 0.5], 2.0),
        ("divopd-focus", 0): ([0.5, 0.6], 1.0),
        ("divopd-focus", 1): ([0.2, 0.4], 1.0),
        ("divopd-base", 1): ([0.1, 0.2], 1.0),  # its seed 0 did not run
    }
    runs = []
    for (arm, seed), (success, seconds) in curves.items():
        folder = tmp_path / "runs" / arm / f"seed{seed}"
        folder.mkdir(parents=True)
        records = [
            {"step": step, "learner/supervised_tokens": 100.0, "learner/step_s": seconds}
            | ({"eval/success_rate": success[step // 2 - 1]} if step % 2 == 0 else {})
            for step in range(1, 5)
        ]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(ArmRun(arm, seed, [0, 2, 4], [0.07, *success], [30.0] * 3, [0, 1, 2], 1.0, 60.0))
    runs.append(ArmRun("divopd", 0, [0, 2, 4], [0.07, 0.5, 0.6], [30.0] * 3, [0, 1, 2], 1.0, 60.0))  # no metrics here
    baselines = Baselines(
        student=EvalResult("s", "valid_seen", 35, 0.07, 29.0, 0.0, 5.0, samples=4),
        teacher=EvalResult("t", "valid_seen", 35, 0.84, 12.0, 0.0, 5.0, samples=4),
        models={"ladder": "alfworld", "folder": "shipped", "reused": True, "record": {"spec": LADDER_SPEC}},
    )
    machine = {"wall_s": 60.0, "cpus": 2, "load_start": (1.0, 1.0, 1.0), "load_end": (1.0, 1.0, 1.0)}
    text = write_report(spec, Measured(baselines, runs, machine, [], None), tmp_path, "default size").read_text()
    assert "the alfworld model ladder's" in text and "teacher 128 x 2; student 64 x 2" in text
    assert "Held-out: 4 episodes on each of the first" in text
    speed_up_row = re.compile(r"\| [\w-]+ \| \d of \d \|")
    rows = {line.split(" |")[0].strip("| "): line for line in text.splitlines() if speed_up_row.match(line)}
    assert rows["opd-async"] == "| opd-async | 2 of 2 | 4 | 400 | 8 | 1.00x (2 seeds) | 1.00x (2 seeds) |"
    assert rows["divopd-focus"] == "| divopd-focus | 1 of 2 | 2 | 200 | 2 | 2.00x (1 seeds) | 4.00x (1 seeds) |"
    assert rows["divopd-base"] == "| divopd-base | 0 of 1 | - | - | - | - | - |"
    assert "| divopd | " not in "\n".join(rows.values())  # its metrics are gone (an earlier report's run)
    assert "Not in it (their metrics are not here): divopd seed 0." in text
    assert "runs/divopd-focus/seed0/episodes/" in text and "runs/divopd-focus-takeover/" not in text  # not run
    assert "[divopd-base, seed 1](runs/divopd-base/seed1/episodes/step_000004.html)" in text
    with pytest.raises(ConfigError, match="needs a `target`"):
        replace(sized, target=None).checked("test")


def test_report_compares_teacher_scored_arms_at_equal_teacher_tokens(tmp_path: Path) -> None:
    """BranchOPD's measure: each teacher-scored arm's held-out success at the teacher-token budget all of them
    reached, read off its seed-mean curve; an arm without a teacher (GRPO) is left out."""
    spec = load_spec("atod-ablation").sized(False, {"steps": 4, "eval_every": 2}, arms=["grpo", "opd", "branchopd"])
    curves = {"opd": ([0.3, 0.5], [1000.0, 2000.0]), "branchopd": ([0.4, 0.6], [500.0, 1000.0])}
    runs = [
        ArmRun(arm, seed, [0, 2, 4], [0.07, *success], [30.0] * 3, [0, 1, 2], teacher[-1], 60.0, [0.0, *teacher])
        for arm, (success, teacher) in curves.items()
        for seed in (0, 1)
    ]
    runs += [
        ArmRun("grpo", seed, [0, 2, 4], [0.07, 0.1, 0.1], [30.0] * 3, [0, 1, 2], 0.0, 60.0, [0.0] * 3)
        for seed in (0, 1)
    ]
    baselines = Baselines(
        student=EvalResult("s", "valid_seen", 16, 0.07, 29.0, 0.0, 5.0),
        teacher=EvalResult("t", "valid_seen", 16, 0.84, 12.0, 0.0, 5.0),
        models={"teacher-sft": sft(1500, 0.67), "student-warm": sft(600, 0.40), "reused": True},
    )
    machine = {"wall_s": 60.0, "cpus": 2, "load_start": (1.0, 1.0, 1.0), "load_end": (1.0, 1.0, 1.0)}
    text = write_report(spec, Measured(baselines, runs, machine, [], None), tmp_path, "default size").read_text()
    assert "Held-out success at equal teacher tokens (1,000: the smallest arm's total" in text
    assert "| opd | 2,000 | 0.30 |" in text and "| branchopd | 1,000 | 0.60 |" in text and "| grpo | 0," not in text
    assert (tmp_path / "success-vs-teacher-tokens.png").stat().st_size > 1000


def test_the_models_line_names_a_pretrained_ladders_base() -> None:
    """A SmolLM2 ladder's rungs have no tiny shape: the report names their base and SFT steps (it printed 0 x 0), and
    its caveat their size (it said ~100k parameters)."""
    from trainer.experiments.compare.report import _model_size, _models_line

    rung = {"base": "smollm2", "hidden": 0, "layers": 0, "sft_steps": 200}
    record = {"spec": {"teacher": rung, "student": {**rung, "sft_steps": 6}}}
    line = _models_line({"ladder": "searchqa", "folder": "m", "record": record})
    assert "teacher smollm2 SFT'd 200 steps; student smollm2 SFT'd 6 steps." in line and "x 0" not in line
    models = {"ladder": "searchqa", "folder": "m", "record": record}
    assert _model_size(models) == "SmolLM2-135M models (135M parameters)"
    assert _model_size({"reused": True}) == _model_size({**models, "record": {"spec": {"student": {}}}})


def test_the_held_out_line_names_the_families_taken_in_turn() -> None:
    """Search-QA's comparison takes its held-out tasks in turn from seven datasets: the report says so (it said 'the
    first 56 tasks', which on that split are all NQ); a comparison without families keeps the first tasks."""
    from trainer.experiments.compare.report import _held_out_tasks

    mixed = _held_out_tasks(load_spec("atod-ladder-searchqa"))
    assert mixed.startswith("each of 56 tasks of the eval split taken in turn from its families nq, triviaqa,")
    assert "bamboogle" in mixed
    assert _held_out_tasks(load_spec("atod-ablation")).startswith("each of the first")


def test_an_earlier_reports_runs_fill_the_arms_and_seeds_not_here(tmp_path: Path) -> None:
    """`--earlier`: the runs a committed runs.json records join a report for the arms x seeds whose folders are
    gone, never in place of a run finished here, never outside the comparison's arms and seeds."""
    import json
    from dataclasses import asdict

    import pytest

    from trainer.config import ConfigError
    from trainer.experiments.compare import compare
    from trainer.experiments.compare.run import earlier_runs, read_run_record

    spec = load_spec("divopd-ladder").sized(False, {"steps": 4, "eval_every": 2, "seeds": 2})

    def arm_run(arm: str, seed: int, final: float) -> ArmRun:
        return ArmRun(arm, seed, [0, 2, 4], [0.07, final / 2, final], [30.0] * 3, [0, 1, 2], 1.0, 60.0)

    recorded = [arm_run("opd-async", 0, 0.3), arm_run("opd-async", 1, 0.4), arm_run("divopd", 0, 0.5)]
    recorded += [arm_run("grpo", 0, 0.1), arm_run("divopd", 2, 0.6)]  # not an arm here; a seed beyond the two
    record = tmp_path / "runs.json"
    record.write_text(json.dumps({"runs": [asdict(r) for r in recorded]}))
    here = [arm_run("opd-async", 0, 0.9)]
    kept = earlier_runs(spec, read_run_record(record), here)
    assert [(r.arm, r.seed, r.success[-1]) for r in kept] == [("opd-async", 1, 0.4), ("divopd", 0, 0.5)]
    with pytest.raises(ConfigError, match="no such file"):
        read_run_record(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text(json.dumps({"runs": [{"arm": "opd"}]}))
    with pytest.raises(ConfigError, match="not a comparison's runs"):
        read_run_record(tmp_path / "other.json")
    # a wrong file fails before the comparison makes its folder, starts a server or reads models
    with pytest.raises(ConfigError, match="no such file"):
        compare("divopd-ladder", tmp_path / "out", tmp_path / "no-models", report_only=True, earlier=tmp_path / "x")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="needs --report-only"):
        compare("divopd-ladder", tmp_path / "out", earlier=record)
