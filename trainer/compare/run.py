"""`trainer compare`: run every arm of a comparison for every seed, sequentially, on one local server."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.compare.spec import Arm, CompareSpec
from trainer.config import TrainerConfig, load_config
from trainer.driver import train
from trainer.eval import EvalResult, evaluate
from trainer.quickstart import expert_episodes, make_models, sft_from_expert
from trainer.rollout.local_server import LocalServer


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
    teacher_tokens: float
    wall_s: float


@dataclass(frozen=True)
class Baselines:
    """Starting points every arm shares (seed-0 evaluation of the student and teacher)."""

    student: EvalResult
    teacher: EvalResult


def arm_config(spec: CompareSpec, arm: Arm, seed: int, out: Path, models: Path, target: str) -> TrainerConfig:
    """The trainer config of one arm and seed, over the shared server and models."""
    return load_config(
        spec.base,
        [
            f"env.name={spec.env}",
            f"env.targets=[{target}]",
            f"output_dir={out / 'runs' / arm.name / f'seed{seed}'}",
            f"models.student={models / 'student-warm'}",
            f"models.teacher={models / 'teacher-sft'}",
            *spec.arm_overrides(arm, seed),
        ],
    )


def read_curve(arm: Arm, seed: int, output_dir: Path, start: EvalResult, wall_s: float) -> ArmRun:
    """The arm's held-out curve and token counts from its metrics.jsonl."""
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps, success, turns, tokens = [0], [start.success_rate], [start.mean_turns], [0.0]
    generated = scored = 0.0
    for record in records:
        generated += record.get("rollout/generated_tokens") or 0.0
        scored += record.get("teacher/tokens_scored") or 0.0
        if record.get("eval/success_rate") is not None:
            steps.append(record["step"])
            success.append(record["eval/success_rate"])
            turns.append(record["eval/mean_turns"])
            tokens.append(generated)
    return ArmRun(arm.name, seed, steps, success, turns, tokens, scored, wall_s)


def run_compare(spec: CompareSpec, out_dir: str | Path, models_dir: str | Path) -> tuple[Baselines, list[ArmRun]]:
    """Models (cached), the shared baselines, then every arm x seed; results also in `out/runs.json`."""
    out, models = Path(out_dir), Path(models_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[ArmRun] = []
    with LocalServer(spec.env) as server:
        base = arm_config(spec, spec.arms[0], 0, out, models, server.address)
        episodes = expert_episodes(base, server.address, spec.expert_tasks)
        tiny = make_models(base, episodes, models)
        sft_from_expert(base, episodes, tiny.teacher, steps=spec.teacher_sft_steps, out_dir=models / "teacher-sft")
        sft_from_expert(base, episodes, tiny.student, steps=spec.student_sft_steps, out_dir=models / "student-warm")
        held_out = base.model_copy(update={"eval": base.eval.model_copy(update={"num_tasks": spec.eval_tasks})})
        baselines = Baselines(
            student=evaluate(
                held_out, str(models / "student-warm"), targets=[server.address], html=out / "episodes-student.html"
            ),
            teacher=evaluate(
                held_out, str(models / "teacher-sft"), targets=[server.address], html=out / "episodes-teacher.html"
            ),
        )
        starts = {
            seed: evaluate(held_out, str(models / "student-warm"), targets=[server.address], seed=seed)
            for seed in range(spec.seeds)
        }
        for arm in spec.arms:
            for seed in range(spec.seeds):
                config = arm_config(spec, arm, seed, out, models, server.address)
                t0 = time.perf_counter()
                result = train(config, progress=False)
                wall = time.perf_counter() - t0
                runs.append(read_curve(arm, seed, result.output_dir, starts[seed], wall))
                print(f"compare: {arm.name} seed {seed}: held-out success {runs[-1].success[-1]:.2f} ({wall:.0f} s)")
    (out / "runs.json").write_text(
        json.dumps({"baselines": asdict(baselines), "runs": [asdict(r) for r in runs]}, indent=2) + "\n"
    )
    return baselines, runs
