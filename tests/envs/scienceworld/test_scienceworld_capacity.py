"""The per-worker session cap: sessions beyond it are refused, the others keep working."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from envhub.client import EnvhubClient, EnvhubError
from envhub.envs.scienceworld.jvm import HEAP_STEP, YOUNG_MB, heap_mb, heap_options
from envhub.envs.scienceworld.kind import ScienceWorldKind
from envhub.server.background import BackgroundServer

TASK = "boil/0"


def _refused(call: Callable[[], object]) -> EnvhubError:
    with pytest.raises(EnvhubError) as caught:
        call()
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.reason == "SESSIONS_PER_WORKER"
    assert "scienceworld.sessions_per_worker" in str(caught.value)
    return caught.value


def test_cap_refuses_create_fork_and_restore_and_frees_on_close() -> None:
    config = {"scienceworld": {"sessions_per_worker": "2"}}
    with (
        BackgroundServer.local("scienceworld", workers=1, environment_config=config) as server,
        EnvhubClient(server.target) as client,
    ):
        first = client.create_session("scienceworld", task=TASK).session_id
        second = client.create_session("scienceworld", task=TASK).session_id
        client.step(first, "open door to kitchen")
        snapshot = client.snapshot(first)
        error = _refused(lambda: client.create_session("scienceworld", task=TASK))
        assert error.metadata.get("sessions_per_worker") == "2"
        _refused(lambda: client.fork(first, 1))
        _refused(lambda: client.restore(snapshot))
        # the refusals harmed nobody: both sessions step on
        assert "kitchen" in client.step(first, "go to kitchen").text
        client.step(second, "look around")
        client.close_session(second)
        _refused(lambda: client.fork(first, 2))  # one slot: the fork that fitted is closed again
        [fork] = client.fork(first, 1)
        assert client.step(fork, "look around").text == client.step(first, "look around").text
        _refused(lambda: client.create_session("scienceworld", task=TASK))


def test_heap_is_planned_in_steps_up_to_the_cap_unless_given() -> None:
    assert heap_options(["-XX:+UseSerialGC"], 160) == (
        f"-Xms{heap_mb(HEAP_STEP)}m",
        f"-Xmx{heap_mb(160)}m",
        f"-Xmn{YOUNG_MB}m",
        "-XX:MinHeapFreeRatio=10",
        "-XX:MaxHeapFreeRatio=40",
        "-XX:+UseSerialGC",
    )
    assert heap_options([], 4)[:2] == (f"-Xms{heap_mb(4)}m", f"-Xmx{heap_mb(4)}m")  # a cap below the first step
    assert heap_options(["-Xmx3g"], 10) == ("-Xmx3g",)
    config = ScienceWorldKind.from_config({"sessions_per_worker": "4", "heap_step": "2"}).config()
    assert config["sessions_per_worker"] == "4" and config["heap_step"] == "2"
    assert f"-Xmx{heap_mb(4)}m" in config["java_opts"].split()
    assert f"-Xms{heap_mb(2)}m" in config["java_opts"].split()
    for key in ("sessions_per_worker", "heap_step"):
        for bad in ("many", "0"):
            with pytest.raises(ValueError, match=key):
                ScienceWorldKind.from_config({key: bad})
