"""`trainer compare`: run every arm of a comparison for every seed, sequentially, on one local server."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from trainer.config import TrainerConfig, load_config
from trainer.driver import train
from trainer.eval import EvalResult, evaluate
from trainer.experiments.compare.spec import Arm, CompareSpec
from trainer.metrics import read_metrics
from trainer.quickstart import SFT_MARKER, expert_episodes, make_models, sft_from_expert
from trainer.rollout.local_server import LocalServer

TEACHER, STUDENT = "teacher-sft", "student-warm"
RUN_RECORD = "compare-run.json"
BASELINES = "baselines.json"


@dataclass(frozen=True)
class ArmRun:
    """One arm trained under one seed: its held-out curve and its costs."""

    arm: str
    seed: int
    steps: list[int]
    success: list[float]
    """Held-out success after each evaluated step (step 0: the shared warm student)."""
    mean_turns: list[float]
    student_tokens: list[float]
    """Student tokens generated in training rollouts, cumulative at each evaluated step."""
    teacher_tokens: float | None
    """Teacher tokens scored over the run (None where the driver does not log it: the async driver)."""
    wall_s: float


@dataclass(frozen=True)
class Baselines:
    """Starting points every arm shares (seed-0 evaluation of the student and teacher) and how they were made."""

    student: EvalResult
    teacher: EvalResult
    models: dict[str, Any]
    """`sft.json` of the teacher and the student (SFT steps, per-turn exact match) and whether they were reused."""


def arm_config(spec: CompareSpec, arm: Arm, seed: int, out: Path, models: Path, target: str) -> TrainerConfig:
    """The trainer config of one arm and seed, over the shared server and models."""
    config = load_config(
        spec.base,
        [
            f"env.name={spec.env}",
            f"env.targets=[{target}]",
            f"output_dir={out / 'runs' / arm.name / f'seed{seed}'}",
            f"models.student={models / STUDENT}",
            f"models.teacher={models / TEACHER}",
            *spec.arm_overrides(arm, seed),
        ],
    )
    if config.divopd.enabled:  # the async driver has no periodic eval: compare evaluates its checkpoints
        config = config.model_copy(update={"checkpoint_every": spec.eval_every})
    return config


def prepare_models(spec: CompareSpec, base: TrainerConfig, target: str, models: Path) -> dict[str, Any]:
    """Reuse the SFT teacher and warm student already in `models` (made by `trainer quickstart` or an earlier
    compare, whatever their SFT sizes), else make them with the quickstart's functions at the spec's sizes."""
    markers = {name: models / name / SFT_MARKER for name in (TEACHER, STUDENT)}
    reused = all(m.is_file() for m in markers.values())
    if reused:
        print(f"compare: reusing the SFT teacher and warm student in {models}")
    else:
        sizes = f"SFT {spec.teacher_sft_steps}/{spec.student_sft_steps} steps"
        print(f"compare: making the tiny models in {models} ({sizes})")
        episodes = expert_episodes(base, target, spec.expert_tasks)
        tiny = make_models(base, episodes, models)
        sft_from_expert(base, episodes, tiny.teacher, steps=spec.teacher_sft_steps, out_dir=models / TEACHER)
        sft_from_expert(base, episodes, tiny.student, steps=spec.student_sft_steps, out_dir=models / STUDENT)
    from trainer.models.loading import check_same_tokenizer, load_tokenizer

    check_same_tokenizer(load_tokenizer(models / TEACHER), load_tokenizer(models / STUDENT))
    info: dict[str, Any] = {name: json.loads(m.read_text()) for name, m in markers.items()}
    info["reused"] = reused
    return info


def generated_tokens(record: dict[str, Any]) -> float:
    """Student tokens one step generated: its rollouts', or with branching the main trajectories' plus the
    continuations' (`branch/student_tokens`)."""
    return float(record.get("rollout/generated_tokens") or record.get("branch/student_tokens") or 0.0)


def token_curve(output_dir: Path, steps: list[int]) -> list[float]:
    """Cumulative student tokens generated at each of `steps` (step 0: none), from the run's metrics.jsonl."""
    cumulative, generated = {0: 0.0}, 0.0
    for record in read_metrics(output_dir / "metrics.jsonl"):
        generated += generated_tokens(record)
        cumulative[record["step"]] = generated
    return [cumulative[step] for step in steps]


def read_curve(
    arm: Arm, seed: int, output_dir: Path, start: EvalResult, wall_s: float, evals: dict[int, EvalResult] | None = None
) -> ArmRun:
    """The arm's held-out curve and token counts from its metrics.jsonl: held-out results from the logged
    `eval/*`, or for checkpoint-evaluated (async) runs from `evals` by step."""
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps, success, turns, tokens = [0], [start.success_rate], [start.mean_turns], [0.0]
    generated, scored = 0.0, 0.0
    for record in records:
        generated += generated_tokens(record)
        scored += record.get("teacher/tokens_scored") or 0.0
        result = (evals or {}).get(record["step"])
        if record.get("eval/success_rate") is not None:
            success.append(record["eval/success_rate"])
            turns.append(record["eval/mean_turns"])
        elif result is not None:
            success.append(result.success_rate)
            turns.append(result.mean_turns)
        else:
            continue
        steps.append(record["step"])
        tokens.append(generated)
    return ArmRun(arm.name, seed, steps, success, turns, tokens, scored, wall_s)


def checkpoint_evals(config: TrainerConfig, output_dir: Path, target: str, seed: int) -> dict[int, EvalResult]:
    """Held-out results of every saved checkpoint of a run (the async driver's arms); seed 0 writes the last
    one's sample episodes where the sync driver writes them (`episodes/step_N.html`)."""
    checkpoints = sorted((output_dir / "checkpoints").glob("step_*"))
    evals = {}
    for checkpoint in checkpoints:
        step = int(checkpoint.name.removeprefix("step_"))
        last = seed == 0 and checkpoint == checkpoints[-1]
        html = output_dir / "episodes" / f"{checkpoint.name}.html" if last else None
        evals[step] = evaluate(config, str(checkpoint), targets=[target], seed=seed, html=html)
    return evals


def shared_baselines(held_out: TrainerConfig, info: dict[str, Any], target: str, models: Path, out: Path) -> Baselines:
    """Seed-0 held-out evaluation of the warm student and the teacher (with their episode pages), recorded in
    `out/BASELINES` and reused while the models and the evaluation settings are the same."""
    env = held_out.env.model_dump(mode="json", exclude={"targets"})
    key = {"eval": held_out.eval.model_dump(mode="json"), "env": env, "models": info}
    path = out / BASELINES
    if path.is_file() and (record := json.loads(path.read_text()))["key"] == key:
        return Baselines(EvalResult(**record["student"]), EvalResult(**record["teacher"]), info)
    student = evaluate(held_out, str(models / STUDENT), targets=[target], html=out / "episodes-student.html")
    teacher = evaluate(held_out, str(models / TEACHER), targets=[target], html=out / "episodes-teacher.html")
    path.write_text(json.dumps({"key": key, "student": asdict(student), "teacher": asdict(teacher)}, indent=2) + "\n")
    return Baselines(student, teacher, info)


def run_arm(config: TrainerConfig, arm: Arm, seed: int, target: str, start: EvalResult) -> ArmRun:
    """Train one arm x seed from scratch (a stopped attempt's folder is cleared first: metrics.jsonl appends),
    read its curve and record it next to the run (`RUN_RECORD`, with its config)."""
    shutil.rmtree(config.output_dir, ignore_errors=True)
    t0 = time.perf_counter()
    result = train(config, progress=False)
    evals = checkpoint_evals(config, result.output_dir, target, seed) if config.divopd.enabled else None
    run = read_curve(arm, seed, result.output_dir, start, time.perf_counter() - t0, evals)
    record = {"config": config.model_dump(mode="json"), "run": asdict(run)}
    (result.output_dir / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return run


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """A dumped config without the server address (each compare starts its own server on a free port)."""
    return {**config, "env": {k: v for k, v in config.get("env", {}).items() if k != "targets"}}


def finished_run(config: TrainerConfig) -> ArmRun | None:
    """The recorded result of an arm x seed already run with exactly this config (an interrupted comparison
    resumes where it stopped), else None."""
    path = Path(config.output_dir) / RUN_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if _settings(record.get("config", {})) != _settings(config.model_dump(mode="json")):
        return None
    print(f"compare: reusing the finished run in {path.parent}")
    run = ArmRun(**record["run"])
    return replace(run, student_tokens=token_curve(path.parent, run.steps))  # counted as this version counts


def run_compare(
    spec: CompareSpec, out_dir: str | Path, models_dir: str | Path, report_only: bool = False
) -> tuple[Baselines, list[ArmRun], dict[str, Any]]:
    """Models (reused or made), the shared baselines, then every arm x seed (`report_only`: only the runs already
    finished in `out`, e.g. of a stopped comparison); results (and the machine's load and the total wall time)
    also in `out/runs.json`."""
    out, models = Path(out_dir), Path(models_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[ArmRun] = []
    t_start, load_start = time.perf_counter(), os.getloadavg()
    with LocalServer(spec.env) as server:
        base = arm_config(spec, spec.arms[0], 0, out, models, server.address)
        info = prepare_models(spec, base, server.address, models)
        held_out = base.model_copy(update={"eval": base.eval.model_copy(update={"num_tasks": spec.eval_tasks})})
        baselines = shared_baselines(held_out, info, server.address, models, out)
        starts = {0: baselines.student}  # the student's start under each seed's eval seed, evaluated when needed
        for seed in range(spec.seeds):  # seed-major: a stopped comparison has every arm at the first seeds
            for arm in spec.arms:
                config = arm_config(spec, arm, seed, out, models, server.address)
                finished = finished_run(config)
                if finished is None and report_only:
                    continue
                if finished is None and seed not in starts:
                    starts[seed] = evaluate(held_out, str(models / STUDENT), targets=[server.address], seed=seed)
                runs.append(finished or run_arm(config, arm, seed, server.address, starts[seed]))
                print(f"compare: {arm.name} seed {seed}: held-out success {runs[-1].success[-1]:.2f}")
    machine = {
        "wall_s": sum(r.wall_s for r in runs) if report_only else time.perf_counter() - t_start,
        "wall_of": "the reported runs (sum of their wall times)" if report_only else "the whole comparison",
        "cpus": os.cpu_count(),
        "load_start": load_start,
        "load_end": os.getloadavg(),
    }
    record = {"baselines": asdict(baselines), "machine": machine, "runs": [asdict(r) for r in runs]}
    (out / "runs.json").write_text(json.dumps(record, indent=2) + "\n")
    return baselines, runs, machine
