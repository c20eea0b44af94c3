"""The app openenv.yaml names: OpenEnv's server over the envhub server in ENVHUB_TARGET (default
localhost:50051, comma-separated replicas) and the environment in ENVHUB_ENVIRONMENT (default alfworld)."""

import os

from envhub.integrations.openenv import create_openenv_app

app = create_openenv_app(
    os.environ.get("ENVHUB_TARGET", "localhost:50051").split(","),
    os.environ.get("ENVHUB_ENVIRONMENT", "alfworld"),
)
