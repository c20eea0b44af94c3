"""Rollout strategies: drive envhub sessions and record trajectories turn by turn."""

from trainer.rollout.envport import ClientEnvPort, EnvPort, EnvView
from trainer.rollout.group import GroupRollout, RolloutSettings, RolloutStats, SamplingSettings
from trainer.rollout.types import Trajectory, Turn

__all__ = [
    "ClientEnvPort",
    "EnvPort",
    "EnvView",
    "GroupRollout",
    "RolloutSettings",
    "RolloutStats",
    "SamplingSettings",
    "Trajectory",
    "Turn",
]
