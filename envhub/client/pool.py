"""`EnvhubPool`: the blocking client over several replicas (`envhub.client.pool_transport.PoolTransport`)."""

from __future__ import annotations

from envhub.client.pool_transport import PoolTransport
from envhub.client.sync import EnvhubClient


class EnvhubPool(EnvhubClient):
    """`EnvhubClient` over a list of replica targets: `EnvhubPool(["host1:50051", "host2:50051"], token=...)`.

    Each session's calls go to the replica that owns it; new sessions go to the least-loaded
    replica hosting their environment (see `PoolTransport`).
    """

    @property
    def pool(self) -> PoolTransport:
        if not isinstance(self.transport, PoolTransport):
            raise TypeError("an EnvhubPool is built from a list of targets")
        return self.transport

    @property
    def replicas(self) -> list[str]:
        """Ids of the replicas in this pool."""
        return list(self.pool.replicas)
