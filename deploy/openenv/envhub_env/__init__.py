"""envhub for OpenEnv's AutoEnv: `AutoEnv.from_env("envhub", base_url=...)` (classes: envhub.integrations.openenv)."""

from envhub_env.client import EnvhubAction, EnvhubEnv, EnvhubObservation, EnvhubState

__all__ = ["EnvhubAction", "EnvhubEnv", "EnvhubObservation", "EnvhubState"]
