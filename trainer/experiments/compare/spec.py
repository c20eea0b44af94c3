"""Comparison configs (`trainer/configs/compare/<name>.yaml`): arms run under one budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from trainer.config import ConfigError

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "compare"
SIZE_FIELDS = ("seeds", "steps", "eval_every", "eval_tasks", "expert_tasks", "teacher_sft_steps", "student_sft_steps")


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
    lr_search_budget: int
    budget: str
    """Which rollout budget the arms match, in words (written into the report)."""
    expert_tasks: int
    teacher_sft_steps: int
    student_sft_steps: int
    models: str = "runs/models"
    """Default folder of the SFT teacher and warm student (`--models` overrides): the quickstart's for ALFWorld,
    one per environment otherwise (their tokenizers are trained on that environment's text)."""
    common: tuple[str, ...] = ()
    quick: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] = field(default_factory=dict)
    claims: tuple[dict[str, str], ...] = ()
    """The papers' claims `better > worse` (arm names) that the report checks, each with its `text`."""

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
            spec = replace(spec, arms=tuple(a for a in spec.arms if a.name in arms))
        return spec.checked(f"{self.name} sized")

    def checked(self, where: str) -> CompareSpec:
        """This spec, after checking what every run relies on."""
        if len({a.name for a in self.arms}) != len(self.arms):
            raise ConfigError(f"{where}: arm names must be unique")
        if self.steps % self.eval_every:
            raise ConfigError(f"{where}: steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})")
        return self

    def arm_overrides(self, arm: Arm, seed: int) -> list[str]:
        """Config overrides of one arm and seed (budget and learning rate identical across arms); `$steps` in an
        arm's overrides is the learner steps of this size (ATOD's annealing spans the run at every size)."""
        return [
            f"steps={self.steps}",
            f"seed={seed}",
            f"optim.lr={self.lr}",
            f"eval.every={self.eval_every}",
            f"eval.num_tasks={self.eval_tasks}",
            "checkpoint_every=0",
            "resume=false",
            *self.common,
            f"objective.name={arm.objective}",
            *(o.replace("$steps", str(self.steps)) for o in arm.overrides),
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
        spec = CompareSpec(name=path.stem, arms=arms, common=tuple(data.pop("common", ())), claims=claims, **data)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: bad comparison config ({exc})") from exc
    return spec.checked(str(path))
