"""`env.failover_snapshot_every`: a rollout worker's envhub client pools every replica of its target
("dns:///name:port") and tracks each session for failover (envhub.client.failover)."""

from __future__ import annotations

from envhub.bench.procs import ServerProcess
from envhub.client.failover import FailoverTransport
from trainer.config import config_from_dict
from trainer.workers.factory import make_env_port


def test_failover_snapshot_every_puts_the_env_port_over_every_replica_with_failover() -> None:
    sections = {"objective": {"name": "grpo"}, "models": {"teacher": None}}
    with ServerProcess("alfworld") as server:
        plain = make_env_port(config_from_dict(sections), server.target)
        assert not isinstance(plain.client.transport, FailoverTransport)
        plain.client.close()

        config = config_from_dict({**sections, "env": {"failover_snapshot_every": 2}})
        port = make_env_port(config, f"dns:///localhost:{server.port}")
        transport = port.client.transport
        assert isinstance(transport, FailoverTransport) and transport.snapshot_every == 2
        assert len(transport.pool.replicas) == 1
        view = port.start("valid_seen/00000", seed=7, max_steps=10)
        assert transport._sessions[view.session_id].snapshot is not None, "a tracked session, snapshot held"
        port.end(view.session_id)
        port.client.close()
