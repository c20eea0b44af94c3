"""The front's event loop (`ServerConfig.event_loop`): uvloop when installed (auto), else asyncio's; a server on
either answers unary, streamed and batched steps."""

from __future__ import annotations

import asyncio
import sys

import pytest

from envhub import cli
from envhub.client import AsyncEnvhubClient
from envhub.server import ServerConfig
from envhub.server.background import BackgroundServer
from envhub.server.loops import loop_factory, run
from envhub.testing import REFERENCE

TASK = "train-count/0"


async def _loop_type() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_runs_on_asyncios_own_loop() -> None:
    assert run(_loop_type, "asyncio").startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert run(_loop_type, "auto").startswith("asyncio")
    with pytest.raises(ValueError, match="uvloop package is not installed"):
        loop_factory("uvloop")
    assert cli.main(["serve", "--env", REFERENCE, "--port", "0", "--event-loop", "uvloop"]) == 2


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event loop"):
        ServerConfig(environments=(REFERENCE,), event_loop="trio")
    with pytest.raises(ValueError, match="unknown event loop"):
        loop_factory("trio")


def test_with_uvloop_auto_takes_it_and_a_server_on_it_answers_every_way_of_stepping() -> None:
    pytest.importorskip("uvloop")
    assert run(_loop_type, "auto").startswith("uvloop")

    async def play(target: str) -> list[int]:
        async with AsyncEnvhubClient(target) as client:
            first, second = [(await client.create_session("toy", task=TASK)).session_id for _ in range(2)]
            indices = [(await client.step(first, "inc")).step_index]
            indices += [view.step_index for view in await client.step_many([(first, "inc"), (second, "inc")])]
            async with client.stream() as stream:
                indices.append((await stream.step(second, "inc")).step_index)
            async with client.coalesced() as steps:
                indices += [view.step_index for view in await asyncio.gather(steps.step(first, "inc"))]
            return indices

    with BackgroundServer.local(REFERENCE, event_loop="auto") as server:
        assert server.run(_loop_type()).startswith("uvloop")
        assert asyncio.run(play(server.target)) == [1, 2, 1, 2, 3]
