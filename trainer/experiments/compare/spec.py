"""Comparison configs (`trainer/configs/compare/<name>.yaml`): arms run under one budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from trainer.config import ConfigError

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "compare"
SIZE_FIELDS = (
    "seeds",
    "first_seed",
    "steps",
    "eval_every",
    "eval_tasks",
    "expert_tasks",
    "teacher_sft_steps",
    "student_sft_steps",
    "search_steps",
    "search_eval_every",
    "search_seeds",
    "search_tasks",
)


@dataclass(frozen=True)
class Arm:
    """One trained variant: an objective plus config overrides."""

    name: str
    objective: str
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompareSpec:
    """What every arm shares (models, tasks, seeds, budgets, learning rate) and the arms."""

    name: str
    base: str
    env: str
    arms: tuple[Arm, ...]
    seeds: int
    steps: int
    eval_every: int
    eval_tasks: int
    lr: float
    """The learning rate of every arm when there is no search (`lr_values` empty)."""
    budget: str
    """Which rollout budget the arms match, in words (written into the report)."""
    first_seed: int = 0
    """The first of the `seeds` consecutive seeds trained (one process per seed into one folder: `--first-seed`)."""
    expert_tasks: int = 0
    teacher_sft_steps: int = 0
    student_sft_steps: int = 0
    """Without `ladder`: the expert episodes and SFT steps that make the teacher and the warm student when the models
    folder lacks them."""
    ladder: str = ""
    """A model ladder's student and teacher (`trainer make-models --ladder <ladder>`, docs/design/023): those in the
    models folder when made there, else the shipped ones; nothing is made. "": the SFT teacher and warm student."""
    models: str = "runs/models"
    """Default folder of the SFT teacher and warm student (`--models` overrides): the quickstart's for ALFWorld,
    one per environment otherwise (their tokenizers are trained on that environment's text)."""
    common: tuple[str, ...] = ()
    quick: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] = field(default_factory=dict)
    claims: tuple[dict[str, str], ...] = ()
    """The papers' claims `better > worse` (arm names) that the report checks, each with its `text`."""
    lr_values: tuple[float, ...] = ()
    """Learning-rate search: every arm trains `search_steps` steps at each of these values (the same values,
    steps and seeds for every arm) and its long runs use the one with the best held-out success (empty: `lr`)."""
    search_steps: int = 0
    search_eval_every: int = 0
    search_seeds: int = 1
    search_split: str | None = None
    """Split the search evaluates on (None: the eval split); a split other than the reported one keeps the
    choice off the tasks the report measures."""
    search_tasks: int | None = None
    """Held-out tasks of one search evaluation (None: eval_tasks)."""
    target: float | None = None
    """Held-out success tau of the cost-to-target table (DivOPD Table 1: updates, trained tokens and learner seconds
    to first reach it); None: no such table."""
    baseline_arm: str = ""
    """The arm the speed-ups to `target` are measured against (DivOPD: vanilla asynchronous OPD); "": none."""
    resumable: bool = False
    """Checkpoint every `eval_every` steps (the newest kept) and continue a stopped arm x seed from it (long
    comparisons); otherwise a stopped run starts again."""

    @property
    def seed_range(self) -> range:
        """The seeds each arm trains."""
        return range(self.first_seed, self.first_seed + self.seeds)

    @property
    def lr_search_budget(self) -> int:
        """Learning rates tried per arm (1: no search, every arm at `lr`)."""
        return max(len(self.lr_values), 1)

    def sized(self, quick: bool, sizes: Mapping[str, int] | None = None, arms: Sequence[str] = ()) -> CompareSpec:
        """The `--quick` size when asked, with explicit size fields (`seeds`, `steps`, ...) and a subset of the
        arms on top."""
        explicit: dict[str, Any] = dict(sizes or {})
        unknown_sizes = set(explicit) - set(SIZE_FIELDS)
        if unknown_sizes:
            raise ConfigError(f"only {', '.join(SIZE_FIELDS)} can be sized; got {sorted(unknown_sizes)}")
        unknown = set(arms) - {a.name for a in self.arms}
        if unknown:
            raise ConfigError(f"unknown arms {sorted(unknown)}; {self.name} has {', '.join(a.name for a in self.arms)}")
        spec = replace(self, **self.quick) if quick else self
        spec = replace(spec, **explicit)
        if arms:
            # a subset without the baseline arm (one process per arm) trains without the speed-ups; the report over
            # the whole folder (`--report-only`) has them
            baseline = spec.baseline_arm if spec.baseline_arm in arms else ""
            spec = replace(spec, arms=tuple(a for a in spec.arms if a.name in arms), baseline_arm=baseline)
        return spec.checked(f"{self.name} sized")

    def checked(self, where: str) -> CompareSpec:
        """This spec, after checking what every run relies on."""
        if len({a.name for a in self.arms}) != len(self.arms):
            raise ConfigError(f"{where}: arm names must be unique")
        if self.baseline_arm and (self.target is None or self.baseline_arm not in {a.name for a in self.arms}):
            raise ConfigError(
                f"{where}: baseline_arm {self.baseline_arm!r} needs a `target` and must be one of the arms"
            )
        making = (self.expert_tasks, self.teacher_sft_steps, self.student_sft_steps)
        if self.ladder and any(making):
            raise ConfigError(
                f"{where}: the {self.ladder} ladder's models are made by trainer make-models --ladder: "
                "drop expert_tasks, teacher_sft_steps and student_sft_steps"
            )
        if not self.ladder and not all(making):
            raise ConfigError(
                f"{where}: expert_tasks, teacher_sft_steps and student_sft_steps (the models made when "
                "missing) are needed without `ladder`"
            )
        if self.seeds < 1 or self.first_seed < 0:
            raise ConfigError(f"{where}: seeds must be >= 1 and first_seed >= 0")
        if self.steps % self.eval_every:
            raise ConfigError(f"{where}: steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})")
        if self.lr_values:
            if len(set(self.lr_values)) < 2:
                raise ConfigError(f"{where}: lr_values must hold at least 2 different learning rates (or none)")
            if self.search_eval_every < 1 or self.search_steps % self.search_eval_every:
                raise ConfigError(
                    f"{where}: search_steps ({self.search_steps}) must be a positive multiple of search_eval_every "
                    f"({self.search_eval_every})"
                )
        return self

    def arm_overrides(self, arm: Arm, seed: int, lr: float | None = None) -> list[str]:
        """Config overrides of one arm and seed (budget identical across arms; learning rate `lr`, default the
        spec's); `$steps` in an arm's overrides is the learner steps of this size (ATOD's annealing spans the run
        at every size)."""
        kept = [f"checkpoint_every={self.eval_every}", "checkpoint_keep=1", "resume=true"]
        return [
            f"steps={self.steps}",
            f"seed={seed}",
            f"optim.lr={self.lr if lr is None else lr}",
            f"eval.every={self.eval_every}",
            f"eval.num_tasks={self.eval_tasks}",
            *(kept if self.resumable else ["checkpoint_every=0", "resume=false"]),
            *self.common,
            f"objective.name={arm.objective}",
            *(o.replace("$steps", str(self.steps)) for o in arm.overrides),
        ]

    def search_overrides(self, arm: Arm, seed: int, lr: float) -> list[str]:
        """Config overrides of one learning-rate search run: the arm's long-run config (its schedules, e.g. ATOD's
        annealing, as over the long run) cut to `search_steps` steps, evaluated on the search's tasks."""
        split = [f"env.eval_split={self.search_split}"] if self.search_split else []
        return [
            *self.arm_overrides(arm, seed, lr),
            f"steps={self.search_steps}",
            f"eval.every={self.search_eval_every}",
            f"eval.num_tasks={self.search_tasks or self.eval_tasks}",
            *([f"checkpoint_every={self.search_eval_every}"] if self.resumable else []),
            *split,
        ]


def find_config(name: str | Path) -> Path:
    """A comparison config's file: `name` as a path, else the shipped config of that name."""
    path = Path(name)
    if not path.is_file():
        path = SHIPPED / f"{Path(name).stem}.yaml"
        if not path.is_file():
            shipped = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
            raise ConfigError(f"comparison {name!r} not found; shipped: {', '.join(shipped)}")
    return path


def _read(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A comparison config's keys; `extends: <name>` starts from that comparison's keys (each key given here
    replaces the inherited one whole)."""
    if path in seen:
        raise ConfigError(f"{path}: `extends` loops back to itself")
    data = yaml.safe_load(path.read_text()) or {}
    parent = data.pop("extends", None)
    return {**_read(find_config(parent), (*seen, path)), **data} if parent else data


def load_spec(name: str | Path) -> CompareSpec:
    """A comparison config by path or shipped name (`atod-ablation`)."""
    path = find_config(name)
    data = _read(path)
    if "suite" in data:
        raise ConfigError(f"{path} is a suite of comparisons ({', '.join(data['suite'])}): run each, or the suite")
    try:
        arms = tuple(Arm(a["name"], a["objective"], tuple(a.get("set", ()))) for a in data.pop("arms"))
        unknown = set(data.get("quick", {})) - set(SIZE_FIELDS)
        if unknown:
            raise ConfigError(f"{path}: quick may only size {', '.join(SIZE_FIELDS)}; got {sorted(unknown)}")
        claims = tuple(data.pop("claims", ()))
        lr_values = tuple(float(v) for v in data.pop("lr_values", ()))
        spec = CompareSpec(
            name=path.stem,
            arms=arms,
            common=tuple(data.pop("common", ())),
            claims=claims,
            lr_values=lr_values,
            **data,
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: bad comparison config ({exc})") from exc
    return spec.checked(str(path))
