"""The client module AutoEnv imports (`<module>.client`); the classes live in envhub.integrations.openenv."""

from envhub.integrations.openenv import EnvhubAction, EnvhubEnv, EnvhubObservation, EnvhubState

__all__ = ["EnvhubAction", "EnvhubEnv", "EnvhubObservation", "EnvhubState"]
