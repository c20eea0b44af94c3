"""`trainer compare`: run every arm of a comparison for every seed, sequentially, on one local server."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, TrainerConfig, config_from_dict, load_config
from trainer.driver import train
from trainer.eval import EvalResult, evaluate
from trainer.experiments.compare.lr_search import SEARCH_RECORD, SearchResult, search_result
from trainer.experiments.compare.spec import Arm, CompareSpec
from trainer.metrics import JSONL, read_metrics, run_time
from trainer.models.ladder import RECORD as LADDER_RECORD
from trainer.models.ladder import made_ladder_models
from trainer.quickstart.models import SFT_MARKER, SHIPPED, expert_episodes, make_models, sft_from_expert
from trainer.quickstart.plans import LADDER
from trainer.rollout.local_server import LocalServer
from trainer.workers.learner import latest_checkpoint

TEACHER, STUDENT = "teacher-sft", "student-warm"
RUN_RECORD = "compare-run.json"
BASELINES = "baselines.json"
SEARCH_BASELINES = "lr-search-baselines.json"


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
    teacher_token_curve: list[float] = field(default_factory=list)
    """Teacher tokens scored, cumulative at each evaluated step (step 0: none; empty in records from before it)."""


@dataclass(frozen=True)
class Baselines:
    """Starting points every arm shares (seed-0 evaluation of the student and teacher) and how they were made."""

    student: EvalResult
    teacher: EvalResult
    models: dict[str, Any]
    """`sft.json` of the teacher and the student (SFT steps, per-turn exact match) and whether they were reused."""


def arm_config(
    spec: CompareSpec,
    arm: Arm,
    seed: int,
    out: Path,
    models: Path,
    target: str,
    lr: float | None = None,
    *,
    search: bool = False,
) -> TrainerConfig:
    """The trainer config of one arm and seed at learning rate `lr` (default the spec's), over the shared server
    and models; `search`: its learning-rate search run (`out/lr-search/<arm>/lr<lr>/seed<k>`)."""
    if search:
        assert lr is not None, "a search run has its own learning rate"
        folder = out / "lr-search" / arm.name / f"lr{lr:g}" / f"seed{seed}"
        overrides = spec.search_overrides(arm, seed, lr)
    else:
        folder, overrides = out / "runs" / arm.name / f"seed{seed}", spec.arm_overrides(arm, seed, lr)
    folders = model_folders(spec, models)
    config = load_config(
        spec.base,
        [
            f"env.name={spec.env}",
            f"env.targets=[{target}]",
            f"output_dir={folder}",
            f"models.student={folders['student']}",
            f"models.teacher={folders['teacher']}",
            *overrides,
        ],
    )
    return config


def model_folders(spec: CompareSpec, models: Path) -> dict[str, Path]:
    """The student's and the teacher's folders: the warm student and SFT teacher in `models`, or with `spec.ladder`
    that ladder's models (in `models` when made there, else the shipped ones)."""
    if not spec.ladder:
        return {"student": models / STUDENT, "teacher": models / TEACHER}
    plan = LADDER.get(spec.ladder)  # a ladder the quickstart ships (ALFWorld's); the others are made by a command
    folders = made_ladder_models(spec.ladder, models) or (
        made_ladder_models(spec.ladder, SHIPPED / plan.folder) if plan else None
    )
    if folders is None:
        where = f"neither in {models} nor shipped" if plan else f"not in {models}"
        raise ConfigError(
            f"the {spec.ladder} ladder's models are {where}: make them with "
            f"trainer make-models --ladder {spec.ladder} --out {models}"
        )
    return folders


@contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """Hold `folder/.compare.lock` exclusively: comparisons running disjoint `--arms` into one folder (one process
    per core) make the shared models and baselines once, the others wait for them and reuse them."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".compare.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prepare_models(spec: CompareSpec, base: TrainerConfig, target: str, models: Path) -> dict[str, Any]:
    """Reuse the SFT teacher and warm student already in `models` (made by `trainer quickstart` or an earlier
    compare, whatever their SFT sizes), else make them with the quickstart's functions at the spec's sizes
    (under `folder_lock`: a comparison started beside this one waits for them); a ladder's are only found. Returns
    what made them (`sft.json` of each, or the ladder's record) and whether they were reused."""
    if spec.ladder:
        folder = model_folders(spec, models)["student"].parent
        print(f"compare: the {spec.ladder} ladder's models in {folder}")
        record = json.loads((folder / LADDER_RECORD).read_text())
        return {"ladder": spec.ladder, "folder": str(folder), "record": record, "reused": True}
    markers = {name: models / name / SFT_MARKER for name in (TEACHER, STUDENT)}
    with folder_lock(models):
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


def scored_tokens(record: dict[str, Any]) -> float:
    """Teacher tokens one step scored (0 where none or not logged)."""
    return float(record.get("teacher/tokens_scored") or 0.0)


def token_curve(
    output_dir: Path, steps: list[int], per_step: Callable[[dict[str, Any]], float] = generated_tokens
) -> list[float]:
    """Cumulative `per_step` tokens (default: student tokens generated) at each of `steps` (step 0: none), from the
    run's metrics.jsonl."""
    cumulative, total = {0: 0.0}, 0.0
    for record in sorted(read_metrics(output_dir / "metrics.jsonl"), key=lambda r: r["step"]):
        total += per_step(record)
        cumulative[record["step"]] = total
    return [cumulative[step] for step in steps]


def read_curve(arm: Arm, seed: int, output_dir: Path, start: EvalResult, wall_s: float) -> ArmRun:
    """The arm's held-out curve (the logged `eval/*`, sync and async drivers alike) and token counts from its
    metrics.jsonl, in step order (the async driver logs an evaluation after later steps' records)."""
    records = sorted(read_metrics(output_dir / "metrics.jsonl"), key=lambda r: r["step"])
    steps, success, turns, tokens, teacher = [0], [start.success_rate], [start.mean_turns], [0.0], [0.0]
    generated, scored = 0.0, 0.0
    for record in records:
        generated += generated_tokens(record)
        scored += scored_tokens(record)
        if record.get("eval/success_rate") is None or record["step"] == 0:  # step 0: `start` (eval.at_start)
            continue
        success.append(record["eval/success_rate"])
        turns.append(record["eval/mean_turns"])
        steps.append(record["step"])
        tokens.append(generated)
        teacher.append(scored)
    return ArmRun(arm.name, seed, steps, success, turns, tokens, scored, wall_s, teacher)


def shared_baselines(
    held_out: TrainerConfig, info: dict[str, Any], target: str, out: Path, name: str = BASELINES
) -> Baselines:
    """Seed-0 held-out evaluation of the warm student and the teacher (`eval.samples` episodes per task, as the runs'
    evaluations), recorded in `out/name` and reused while the models and the evaluation settings are the same (under
    `folder_lock`: made once for comparisons running side by side into `out`); the comparison's own (`BASELINES`)
    also writes their episode pages."""
    env = held_out.env.model_dump(mode="json", exclude={"targets"})
    key = {"eval": held_out.eval.model_dump(mode="json"), "env": env, "models": info}
    path = out / name
    with folder_lock(out):
        record = json.loads(path.read_text()) if path.is_file() else {}
        if record.get("key") == key and "samples" in record["student"]:  # (records before `samples`: made again)
            return Baselines(EvalResult(**record["student"]), EvalResult(**record["teacher"]), info)
        assert held_out.models.teacher is not None, "every comparison has a teacher"
        folders = {"student": held_out.models.student, "teacher": held_out.models.teacher}
        student, teacher = (
            evaluate(
                held_out,
                folders[role],
                targets=[target],
                samples=held_out.eval.samples,
                html=out / f"episodes-{role}.html" if name == BASELINES else None,
            )
            for role in ("student", "teacher")
        )
        record = {"key": key, "student": asdict(student), "teacher": asdict(teacher)}
        path.write_text(json.dumps(record, indent=2) + "\n")
    return Baselines(student, teacher, info)


def continued(config: TrainerConfig) -> bool:
    """Whether a stopped attempt of this run (same settings, `resume` on, a checkpoint saved) can go on from its
    newest checkpoint; its metrics after that checkpoint are dropped (the driver appends them again). A shorter
    run with otherwise the same settings is continued too (`--size steps=N` lengthens a finished comparison):
    valid where nothing in the config depends on the run's length (atod-long anneals over fixed steps)."""
    out = Path(config.output_dir)
    checkpoint = latest_checkpoint(out) if config.resume else None
    if checkpoint is None or not (out / "config.json").is_file():
        return False
    before = {**_recorded(json.loads((out / "config.json").read_text())), "steps": config.steps}
    if before != _settings(config.model_dump(mode="json")):
        return False
    step = int(Path(checkpoint).name.removeprefix("step_"))
    if step > config.steps:
        return False
    kept = [r for r in read_metrics(out / "metrics.jsonl") if r["step"] <= step]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    print(f"compare: continuing {out} from step {step}")
    return True


def run_arm(config: TrainerConfig, arm: Arm, seed: int, start: EvalResult) -> ArmRun:
    """Train one arm x seed (a stopped attempt continues from its newest checkpoint when the config resumes, else
    its folder is cleared first: metrics.jsonl appends), read its curve and record it next to the run
    (`RUN_RECORD`, with its config). Its wall time counts the earlier attempts' training up to the checkpoint it
    continued from (their metrics' `RUN_TIME`) and this attempt's whole `train` call."""
    before = 0.0
    if continued(config):
        before = run_time(read_metrics(Path(config.output_dir) / JSONL))
    else:
        shutil.rmtree(config.output_dir, ignore_errors=True)
    t0 = time.perf_counter()
    result = train(config, progress=False)
    run = read_curve(arm, seed, result.output_dir, start, before + time.perf_counter() - t0)
    record = {"config": config.model_dump(mode="json"), "run": asdict(run)}
    (result.output_dir / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return run


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """A dumped config without where it ran and what it kept: the server address (each compare starts its own
    server on a free port), the output folder (a comparison's folder, moved or copied, keeps its runs) and how many
    checkpoints it keeps on disk (`checkpoint_keep` changes no result)."""
    env = {k: v for k, v in config.get("env", {}).items() if k != "targets"}
    return {**{k: v for k, v in config.items() if k not in ("output_dir", "checkpoint_keep")}, "env": env}


def _recorded(config: dict[str, Any]) -> dict[str, Any]:
    """`_settings` of a config recorded by an earlier version, read through today's schema: a field added since
    takes its default (a finished run stays reusable); one it no longer validates under is a different setting."""
    try:
        return _settings(config_from_dict(config).model_dump(mode="json"))
    except ConfigError:
        return {"unreadable": config}


def finished_run(config: TrainerConfig) -> ArmRun | None:
    """The recorded result of an arm x seed already run with exactly this config (an interrupted comparison
    resumes where it stopped), else None."""
    path = Path(config.output_dir) / RUN_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if _recorded(record.get("config", {})) != _settings(config.model_dump(mode="json")):
        return None
    print(f"compare: reusing the finished run in {path.parent}")
    run = ArmRun(**record["run"])
    return replace(  # counted as this version counts
        run,
        student_tokens=token_curve(path.parent, run.steps),
        teacher_token_curve=token_curve(path.parent, run.steps, scored_tokens),
    )


@dataclass(frozen=True)
class Measured:
    """Everything a comparison measured: the starting points, every finished run, the learning-rate search and
    the machine (wall time, load)."""

    baselines: Baselines
    runs: list[ArmRun]
    machine: dict[str, Any]
    search: list[SearchResult]
    """One result per arm whose search finished (empty without `lr_values`)."""
    search_baselines: Baselines | None
    """Teacher and student on the search's held-out tasks (None without a search)."""
    earlier: list[ArmRun] = field(default_factory=list)
    """Those of `runs` taken from an earlier report's runs.json (`earlier_runs`)."""


def search_learning_rates(
    spec: CompareSpec, out: Path, models: Path, target: str, info: dict[str, Any], report_only: bool
) -> tuple[list[SearchResult], Baselines | None]:
    """Every arm's learning-rate search runs (`spec.lr_values` x `search_seeds`, resumed or reused like the long
    runs; `report_only`: only the finished ones), the result of each arm whose search is complete, and the teacher
    and student on the search's held-out tasks; recorded in `out/SEARCH_RECORD`."""
    if not spec.lr_values:
        return [], None
    first = arm_config(spec, spec.arms[0], 0, out, models, target, spec.lr_values[0], search=True)
    baselines = shared_baselines(first, info, target, out, SEARCH_BASELINES)
    starts = {0: baselines.student}
    results, runs = [], []
    for arm in spec.arms:
        runs_by_lr: dict[float, list[ArmRun]] = {}
        for lr in spec.lr_values:
            for seed in range(spec.search_seeds):
                config = arm_config(spec, arm, seed, out, models, target, lr, search=True)
                finished = finished_run(config)
                if finished is None and report_only:
                    continue
                if finished is None and seed not in starts:
                    starts[seed] = evaluate(first, first.models.student, targets=[target], seed=seed)
                run = finished or run_arm(config, arm, seed, starts[seed])
                runs_by_lr.setdefault(lr, []).append(run)
                runs.append({"lr": lr, **asdict(run)})
                print(f"compare: lr search {arm.name} lr {lr:g} seed {seed}: held-out {run.success[-1]:.2f}")
        if len(runs_by_lr) == len(spec.lr_values) and all(len(r) == spec.search_seeds for r in runs_by_lr.values()):
            results.append(search_result(arm.name, runs_by_lr))
            print(f"compare: {arm.name} learning rate {results[-1].chosen:g}")
    record = {
        "baselines": asdict(baselines),
        "results": [{**asdict(r), "chosen": r.chosen} for r in results],
        "runs": runs,
    }
    (out / SEARCH_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return results, baselines


def read_run_record(record: Path) -> list[ArmRun]:
    """Every run an earlier report's `runs.json` (`record`) holds; a missing or foreign file is a ConfigError (read
    before a comparison starts its server, so a wrong path fails at once)."""
    if not record.is_file():
        raise ConfigError(f"--earlier {record}: no such file (an earlier report's runs.json)")
    try:
        return [ArmRun(**r) for r in json.loads(record.read_text())["runs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--earlier {record}: not a comparison's runs.json ({exc})") from exc


def earlier_runs(spec: CompareSpec, recorded: list[ArmRun], found: list[ArmRun]) -> list[ArmRun]:
    """The `recorded` runs (`read_run_record`) for this comparison's arms and seeds that `found` lacks: a
    comparison whose run folders are gone (another machine, a cleaned disk) reported with the runs that ran since.
    Taken as recorded: a runs.json keeps no configs, so their settings are not checked."""
    have = {(r.arm, r.seed) for r in found}
    arms = {arm.name for arm in spec.arms}
    return [r for r in recorded if r.arm in arms and r.seed in spec.seed_range and (r.arm, r.seed) not in have]


def run_compare(
    spec: CompareSpec,
    out_dir: str | Path,
    models_dir: str | Path,
    report_only: bool = False,
    earlier: Path | None = None,
) -> Measured:
    """Models (reused or made), the shared baselines, the learning-rate search, then every arm x seed at its
    chosen learning rate (`report_only`: only the runs already finished in `out`, e.g. of a stopped comparison,
    and those `earlier_runs` takes from `earlier`); results (and the machine's load and the total wall time) also
    in `out/runs.json`."""
    recorded = None if earlier is None else read_run_record(earlier)
    out, models = Path(out_dir), Path(models_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[ArmRun] = []
    t_start, load_start = time.perf_counter(), os.getloadavg()
    settings = arm_config(spec, spec.arms[0], 0, out, models, "local").env.server_settings
    with LocalServer(spec.env, settings=settings) as server:
        base = arm_config(spec, spec.arms[0], 0, out, models, server.address)
        info = prepare_models(spec, base, server.address, models)
        held_out = base.model_copy(update={"eval": base.eval.model_copy(update={"num_tasks": spec.eval_tasks})})
        baselines = shared_baselines(held_out, info, server.address, out)
        search, search_baselines = search_learning_rates(spec, out, models, server.address, info, report_only)
        chosen = {result.arm: result.chosen for result in search}
        starts = {0: baselines.student}  # the student's start under each seed's eval seed, evaluated when needed
        for seed in spec.seed_range:  # seed-major: a stopped comparison has every arm at the first seeds
            for arm in spec.arms:
                if spec.lr_values and arm.name not in chosen:
                    continue  # its search did not finish (report_only)
                config = arm_config(spec, arm, seed, out, models, server.address, chosen.get(arm.name))
                finished = finished_run(config)
                if finished is None and report_only:
                    continue
                if finished is None and seed not in starts:
                    starts[seed] = evaluate(
                        held_out,
                        held_out.models.student,
                        targets=[server.address],
                        seed=seed,
                        samples=held_out.eval.samples,
                    )
                runs.append(finished or run_arm(config, arm, seed, starts[seed]))
                print(f"compare: {arm.name} seed {seed}: held-out success {runs[-1].success[-1]:.2f}")
    kept = [] if recorded is None else earlier_runs(spec, recorded, runs)
    if earlier is not None:
        print(f"compare: {len(kept)} runs taken from {earlier}")
    runs = sorted(runs + kept, key=lambda r: r.seed)  # seed-major, as they ran
    machine = {
        "wall_s": sum(r.wall_s for r in runs) if report_only else time.perf_counter() - t_start,
        "wall_of": "the reported runs (sum of their wall times)" if report_only else "the whole comparison",
        "cpus": os.cpu_count(),
        "load_start": load_start,
        "load_end": os.getloadavg(),
    }
    record = {"baselines": asdict(baselines), "machine": machine, "runs": [asdict(r) for r in runs]}
    (out / "runs.json").write_text(json.dumps(record, indent=2) + "\n")
    return Measured(baselines, runs, machine, search, search_baselines, kept)
