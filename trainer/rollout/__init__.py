"""Rollout strategies: drive envhub sessions and record trajectories turn by turn."""

from envhub.integrations.episodes import EnvView
from trainer.backends.base import SamplingSettings
from trainer.rollout.envport import ClientEnvPort, EnvPort
from trainer.rollout.group import GroupRollout, RolloutSettings, RolloutStats
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
