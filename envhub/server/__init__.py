"""The envhub gRPC server: worker processes, session table, snapshots, limits, and `create_server`."""

from envhub.server.app import create_server, serve
from envhub.server.config import ServerConfig

__all__ = ["ServerConfig", "create_server", "serve"]
