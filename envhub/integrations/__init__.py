"""Adapters that let other training frameworks use envhub environments (each an optional extra).

* `envhub.integrations.skyrl`: a SkyRL-gym `BaseTextEnv` registered as "envhub" (`envhub[skyrl]`).
* `envhub.integrations.openenv`: an OpenEnv `EnvClient` and `Environment` over envhub (`envhub[openenv]`).
* `envhub.integrations.trl`: a TRL `environment_factory` class and a batched `rollout_func` (`envhub[trl]`).
* `envhub.integrations.verifiers`: a `verifiers` `MultiTurnEnv` over envhub (`envhub[verifiers]`).
* `envhub.integrations.verl`: a verl agent loop over envhub (`envhub[verl]`).

Every adapter talks to envhub through the client's session port (`envhub.client.SessionPort`,
implemented by `envhub.client.Sessions`), the same port the envhub trainer's rollouts use.
"""
