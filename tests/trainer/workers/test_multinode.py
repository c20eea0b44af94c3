"""Multi-node settings: "local" servers reachable from other nodes, targets passed through, runtime_env."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from ray.util import get_node_ip_address

from trainer.config import config_from_dict
from trainer.runs import env_targets, local_server_host


def _config(**sections: Any) -> Any:
    return config_from_dict({"objective": {"name": "grpo"}, "models": {"teacher": None}, **sections})


def test_local_servers_bind_every_interface_and_advertise_the_node_on_a_cluster() -> None:
    assert local_server_host(_config()) == ("localhost", "localhost")
    # a local Ray (no address): every actor is on this machine
    assert local_server_host(_config(ray={"enabled": True})) == ("localhost", "localhost")
    cluster = _config(ray={"enabled": True, "address": "ray://head:10001", "runtime_env": {"working_dir": "."}})
    assert local_server_host(cluster) == ("0.0.0.0", get_node_ip_address())
    assert cluster.ray.runtime_env == {"working_dir": "."}
    assert local_server_host(_config(env={"local_host": "trainer-0.envhub"})) == ("0.0.0.0", "trainer-0.envhub")


def test_remote_targets_pass_through_unchanged() -> None:
    targets = ["envhub-alfworld.default.svc.cluster.local:50051", "10.0.0.7:50051"]
    config = _config(env={"targets": targets}, ray={"enabled": True, "address": "auto"})
    with env_targets(config) as resolved:
        assert resolved == targets


@pytest.mark.slow
def test_a_local_server_bound_to_every_interface_is_reached_at_its_advertised_address() -> None:
    pytest.importorskip("alfworld")
    config = _config(env={"local_host": "127.0.0.1"})
    with env_targets(config) as (target,):
        host, port = target.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        with grpc.insecure_channel(target) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
