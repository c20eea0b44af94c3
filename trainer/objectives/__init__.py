"""Objectives as pure tensor functions: TokenBatch, GRPO / OPD / ATOD advantages (BranchOPD's is OPD's), the PBR
term, the PPO actor loss, and the registry the config and learner read."""

from trainer.objectives.atod import AtodConfig, atod_advantage, atod_coefficients
from trainer.objectives.batch import TokenBatch
from trainer.objectives.grpo import GrpoConfig, grpo_advantage
from trainer.objectives.loss import (
    REDUCTIONS,
    ActorLossConfig,
    aggregate_loss,
    loss_weights,
    ppo_actor_loss,
    reduction_unit_ids,
)
from trainer.objectives.opd import OpdConfig, compute_opd_token_advantage, opd_advantage, turn_kl_scores
from trainer.objectives.outcome import compute_grpo_outcome_advantage
from trainer.objectives.registry import (
    ObjectiveSpec,
    build_config,
    get_advantage,
    get_objective,
    objective_names,
    register_objective,
)
from trainer.objectives.tdur import TDUR_UNITS, compute_tdur_weights

__all__ = [
    "REDUCTIONS",
    "TDUR_UNITS",
    "ActorLossConfig",
    "AtodConfig",
    "GrpoConfig",
    "ObjectiveSpec",
    "OpdConfig",
    "TokenBatch",
    "aggregate_loss",
    "atod_advantage",
    "atod_coefficients",
    "build_config",
    "compute_grpo_outcome_advantage",
    "compute_opd_token_advantage",
    "compute_tdur_weights",
    "get_advantage",
    "get_objective",
    "grpo_advantage",
    "loss_weights",
    "objective_names",
    "opd_advantage",
    "ppo_actor_loss",
    "reduction_unit_ids",
    "register_objective",
    "turn_kl_scores",
]
