"""Failover in the trainer: on by default whenever a target stands for several replicas; a replica killed
during a training run (real ALFWorld servers, tiny models) loses no episode."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from envhub.bench.procs import ServerProcess
from envhub.bench.soak import free_port
from envhub.client.failover import SNAPSHOT_EVERY, FailoverTransport
from trainer.config import TrainerConfig, config_from_dict
from trainer.driver import train
from trainer.metrics import read_metrics
from trainer.workers.factory import make_env_port

KEY = "trainer-failover-test-key-shared-by-both-replicas"


def test_failover_is_on_by_default_for_a_target_of_several_replicas() -> None:
    sections = {"objective": {"name": "grpo"}, "models": {"teacher": None}}
    with ServerProcess("alfworld") as server:
        plain = make_env_port(config_from_dict(sections), server.target)
        assert not isinstance(plain.client.transport, FailoverTransport), "one replica: a plain client"
        plain.client.close()
        off = config_from_dict({**sections, "env": {"failover_snapshot_every": 0}})
        assert not isinstance(make_env_port(off, f"dns:///localhost:{server.port}").client.transport, FailoverTransport)

        port = make_env_port(config_from_dict(sections), f"dns:///localhost:{server.port}")
        transport = port.client.transport
        assert isinstance(transport, FailoverTransport) and transport.snapshot_every == SNAPSHOT_EVERY
        assert len(transport.pool.replicas) == 1
        view = port.start("valid_seen/00000", seed=7, max_steps=10)
        assert transport._sessions[view.session_id].snapshot is not None, "a tracked session, snapshot held"
        port.end(view.session_id)
        port.client.close()


def _sessions(metrics_port: int) -> float:
    page = urllib.request.urlopen(f"http://localhost:{metrics_port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith("envhub_sessions{"))


@pytest.mark.slow
def test_a_replica_killed_during_a_training_run_loses_no_episode(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVHUB_SNAPSHOT_KEY", KEY)
    metrics = [free_port(), free_port()]
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                ServerProcess("alfworld", extra=["--set", "alfworld.rooms=small", "--metrics-port", str(port)])
            )
            for port in metrics
        ]
        target = "ipv4:" + ",".join(f"127.0.0.1:{server.port}" for server in servers)
        config = alfworld_config(target, steps=3, output_dir=str(tmp_path / "run"))
        killed_with: list[float] = []

        def kill_mid_rollout() -> None:  # as soon as the first replica holds open episodes
            while servers[0].process.poll() is None:
                held = _sessions(metrics[0])
                if held > 0:
                    servers[0].process.kill()
                    killed_with.append(held)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_mid_rollout)
        killer.start()
        result = train(config, progress=False)
        killer.join(timeout=60)

    assert killed_with and killed_with[0] > 0, "the replica was killed while it held episodes"
    assert result.final_step == 3
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [record["rollout/dropped_ratio"] for record in records] == [0.0] * 3, "no episode lost"
    assert [record["rollout/trajectories"] for record in records] == [4.0] * 3
