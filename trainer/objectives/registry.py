"""Objectives by name: the learner asks here and never knows which objective runs.

Each entry pairs an advantage function `fn(batch, *, step, **hyperparameters) -> (advantages (N, S),
metrics)` with its config dataclass (field names = the function's keyword arguments), its default loss
reduction, whether it needs teacher log-probs and the smallest group it learns from. The registry is
the one source of these facts: the config accepts any registered name and checks the rest here.

A new objective lives in its own module that calls `register_objective` at import; list that module
in `OBJECTIVE_MODULES` so that every process (the config check, Ray workers) imports it before the
first lookup.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trainer.errors import ObjectiveError
from trainer.objectives.atod import (
    AtodConfig,
    atod_advantage,
    atod_listed_coef,
    atod_listed_turn_weights,
    atod_token_kl_weights,
)
from trainer.objectives.batch import TokenBatch
from trainer.objectives.grpo import GrpoConfig, grpo_advantage
from trainer.objectives.listed import ReplyKl
from trainer.objectives.loss import Reduction, check_reduction
from trainer.objectives.opd import OpdConfig, opd_advantage, opd_listed_coef, opd_token_kl_weights, teacher_top_k

AdvantageFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
"""`fn(batch: TokenBatch, *, step: int, **hyperparameters) -> (advantages (N, S), metrics)`."""


@dataclass(frozen=True)
class ObjectiveSpec:
    """One registered objective."""

    name: str
    """Registry key, as written in config files."""
    advantage: AdvantageFn
    """The advantage function."""
    config_cls: type[Any]
    """Frozen dataclass of the advantage hyperparameters; `dataclasses.asdict(config)` are its kwargs."""
    default_reduction: Reduction
    """Loss reduction used when the config does not name one."""
    needs_teacher: bool
    """Whether the batch must carry `logp_teacher` (the driver then runs the teacher)."""
    min_group_size: int = 1
    """Smallest `rollout.group_size` the objective can learn from (2 for group-relative rewards)."""
    listed_coef: Callable[[Any, int], float] | None = None
    """`(config, step) -> weight` of the learner's KL over listed replies (`kl_over: replies`, docs/design/042);
    None: the objective has no such term."""
    listed_turn_weighting: Callable[[TokenBatch, Any], torch.Tensor | None] | None = None
    """`(batch, config) -> each listed turn's weight on its KL` (ATOD's T-DUR, docs/design/046), or None: 1 each."""
    token_kl_weighting: Callable[[TokenBatch, Any, int], torch.Tensor | None] | None = None
    """`(batch, config, step) -> (N, S) weight of each token on the learner's forward KL over the teacher's top
    tokens` (`token_kl: forward`, docs/design/053), None where the config has no such term; None: no such option."""

    def __post_init__(self) -> None:
        check_reduction(self.default_reduction)

    def params_schema(self) -> dict[str, dict[str, Any]]:
        """Each hyperparameter (a `config_cls` field) with its type and default, for docs and tooling."""
        return {
            f.name: {"type": str(f.type), "default": None if f.default is dataclasses.MISSING else f.default}
            for f in dataclasses.fields(self.config_cls)
        }

    def compute(self, batch: TokenBatch, config: Any, *, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Advantages of `batch` at learner step `step` with the hyperparameters of `config`."""
        if not isinstance(config, self.config_cls):
            raise ObjectiveError(
                f"objective {self.name!r} takes a {self.config_cls.__name__}, got {type(config).__name__}",
                reason="INVALID_OBJECTIVE_CONFIG",
            )
        return self.advantage(batch, step=step, **dataclasses.asdict(config))

    def scores_listed_replies(self, config: Any) -> bool:
        """Whether the objective with `config` trains on the KL over listed replies (the teacher scores them)."""
        return self.listed_coef is not None and getattr(config, "kl_over", "tokens") == "replies"

    def rl_over_replies(self, config: Any) -> bool:
        """Whether the objective with `config` takes its RL term's ratio on the listed replies (`rl_over: replies`)."""
        return getattr(config, "rl_over", "tokens") == "replies"

    def reply_kl(self, config: Any) -> ReplyKl:
        """Which KL over the listed replies the learner minimises (`reply_kl`: `reverse` unless the config says)."""
        return getattr(config, "reply_kl", "reverse")

    def listed_weight(self, config: Any, step: int) -> float:
        """The weight of the KL over listed replies at learner step `step` (0 without it)."""
        return self.listed_coef(config, step) if self.listed_coef is not None else 0.0

    def teacher_top_k(self, config: Any) -> int:
        """How many top tokens the teacher returns at each scored token (0: the scored token's log-prob alone)."""
        return teacher_top_k(config) if self.token_kl_weighting is not None else 0

    def token_kl_weights(self, batch: TokenBatch, config: Any, step: int) -> torch.Tensor | None:
        """(N, S) weight of each token on the forward KL over the teacher's top tokens at learner step `step`
        (None: no such term)."""
        return self.token_kl_weighting(batch, config, step) if self.token_kl_weighting is not None else None

    def listed_turn_weights(self, batch: TokenBatch, config: Any) -> torch.Tensor | None:
        """Each of `batch.listed`'s turns' own weight on its KL, on top of `listed_weight` (None: 1 each)."""
        return self.listed_turn_weighting(batch, config) if self.listed_turn_weighting is not None else None


_REGISTRY: dict[str, ObjectiveSpec] = {}
OBJECTIVE_MODULES: list[str] = []
"""Modules that register further objectives (e.g. DivOPD, BranchOPD); imported at the first lookup."""


def _load_modules() -> None:
    for module in OBJECTIVE_MODULES:  # a module imported before costs one sys.modules lookup
        importlib.import_module(module)


def register_objective(spec: ObjectiveSpec) -> None:
    """Add an objective; a name can be registered once."""
    if spec.name in _REGISTRY:
        raise ObjectiveError(f"objective {spec.name!r} is already registered", reason="OBJECTIVE_ALREADY_REGISTERED")
    _REGISTRY[spec.name] = spec


def objective_names() -> tuple[str, ...]:
    """Every registered objective name, sorted."""
    _load_modules()
    return tuple(sorted(_REGISTRY))


def get_objective(name: str) -> ObjectiveSpec:
    """The spec registered under `name`; ObjectiveError (UNKNOWN_OBJECTIVE) listing the known names if none."""
    _load_modules()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ObjectiveError(
            f"unknown objective {name!r}; registered objectives: {', '.join(objective_names())}",
            reason="UNKNOWN_OBJECTIVE",
        ) from None


def get_advantage(name: str) -> AdvantageFn:
    """The advantage function registered under `name`."""
    return get_objective(name).advantage


def build_config(name: str, values: Mapping[str, Any] | None = None) -> Any:
    """The config dataclass of objective `name` from a mapping (e.g. a YAML section), defaults for the rest.

    Unknown keys raise ObjectiveError (UNKNOWN_CONFIG_FIELD) naming the valid ones; bad values raise
    the dataclass's own ObjectiveError (INVALID_OBJECTIVE_CONFIG).
    """
    spec = get_objective(name)
    valid = [f.name for f in dataclasses.fields(spec.config_cls)]
    unknown = sorted(set(values or {}) - set(valid))
    if unknown:
        raise ObjectiveError(
            f"unknown {name} setting(s) {', '.join(unknown)}; valid: {', '.join(valid)}",
            reason="UNKNOWN_CONFIG_FIELD",
        )
    return spec.config_cls(**dict(values or {}))


_OPD = ObjectiveSpec(
    "opd",
    opd_advantage,
    OpdConfig,
    "token-mean",
    needs_teacher=True,
    listed_coef=opd_listed_coef,
    token_kl_weighting=opd_token_kl_weights,
)

for _spec in (
    ObjectiveSpec("grpo", grpo_advantage, GrpoConfig, "seq-mean-token-mean", needs_teacher=False, min_group_size=2),
    _OPD,
    ObjectiveSpec(
        "atod",
        atod_advantage,
        AtodConfig,
        "seq-mean-token-mean",
        needs_teacher=True,
        min_group_size=2,
        listed_coef=atod_listed_coef,
        listed_turn_weighting=atod_listed_turn_weights,
        token_kl_weighting=atod_token_kl_weights,
    ),
    # BranchOPD's loss is OPD's (token-mean, no task reward); its branches and masks come from the rollout.
    dataclasses.replace(_OPD, name="branchopd"),
):
    register_objective(_spec)
