"""The verifiers plugin id for envhub: `--env.taskset.id envhub-verifiers` imports this module.

verifiers resolves a taskset id to a top-level module exporting one `Taskset` (and its `Env`);
the implementation is `envhub.integrations.verifiers`.
"""

from envhub.integrations.verifiers import EnvhubEnvConfig, EnvhubTaskset, EnvhubTasksetConfig, EnvhubVerifiersEnv

__all__ = ["EnvhubEnvConfig", "EnvhubTaskset", "EnvhubTasksetConfig", "EnvhubVerifiersEnv"]
