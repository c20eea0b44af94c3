"""The verifiers plugin id for envhub: `--env.taskset.id envhub-verifiers` imports this module.

verifiers resolves a taskset id to a top-level module exporting one `Taskset` (and its `Env`);
the implementation is `envhub.integrations.verifiers`.
"""

from envhub.integrations.verifiers import EnvhubEnv, EnvhubEnvConfig, EnvhubTaskset, EnvhubTasksetConfig

__all__ = ["EnvhubEnv", "EnvhubEnvConfig", "EnvhubTaskset", "EnvhubTasksetConfig"]
