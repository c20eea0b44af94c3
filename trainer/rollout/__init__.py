"""Rollout strategies: drive envhub sessions and record trajectories turn by turn."""

from envhub.client import EnvView
from trainer.backends.base import SamplingSettings
from trainer.rollout.group import GroupRollout, RolloutSettings, RolloutStats
from trainer.rollout.types import Trajectory, Turn

__all__ = [
    "EnvView",
    "GroupRollout",
    "RolloutSettings",
    "RolloutStats",
    "SamplingSettings",
    "Trajectory",
    "Turn",
]
