"""The per-call bench's parts: the WebSocket baseline and the bare gRPC servers answer like a toy step, and the
summary's ratios."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from websockets.asyncio.client import connect

from envhub.bench.percall import PercallSettings, Served, _served, _summary
from envhub.bench.procs import PortFileProcess
from envhub.client import AsyncEnvhubClient


def test_websocket_baseline_counts_each_sessions_steps() -> None:
    async def play(port: int) -> list[dict[str, object]]:
        async with connect(f"ws://127.0.0.1:{port}") as first, connect(f"ws://127.0.0.1:{port}") as second:
            answers = []
            for socket, action in ((first, "inc"), (first, "look"), (second, "inc")):
                await socket.send(action)
                answers.append(json.loads(await socket.recv()))
            return answers

    with PortFileProcess(lambda port_file: [sys.executable, "-m", "envhub.bench.ws_echo", port_file]) as server:
        answers = asyncio.run(play(server.port))
    assert [(a["text"], a["step_index"]) for a in answers] == [("inc 1", 1), ("look 2", 2), ("inc 1", 1)]


def _round(steps_per_s: float, front: float = 0.5) -> dict[str, float]:
    return {
        "steps_per_s": steps_per_s,
        "front_ms_per_step": front,
        "worker_ms_per_step": 0.1,
        "client_ms_per_step": 0.3,
    }


def test_summary_takes_medians_and_per_round_ratios() -> None:
    rounds = {
        "envhub_unary": [_round(100), _round(300), _round(200)],
        "envhub_stream": [_round(200), _round(300), _round(600)],
        "before_unary": [_round(50), _round(300), _round(400)],
        "before_stream": [_round(100), _round(600), _round(400)],
        "asyncio_unary": [_round(100), _round(100), _round(400)],
        "websocket": [_round(400), _round(600), _round(400)],
        "envhub_batch": [],
    }
    summary = _summary(rounds)
    assert summary["medians"]["envhub_unary"]["steps_per_s"] == 200
    assert "envhub_batch" not in summary["medians"]
    ratios = summary["ratios"]
    assert ratios["envhub_unary_to_websocket"] == 0.5  # per round 0.25, 0.5, 0.5
    assert ratios["envhub_stream_to_unary"] == 2.0  # per round 2, 1, 3
    assert ratios["before_stream_to_unary"] == 2.0  # per round 2, 2, 1
    assert ratios["envhub_unary_to_before"] == 1.0  # per round 2, 1, 0.5
    assert ratios["envhub_unary_to_asyncio"] == 1.0  # per round 1, 3, 0.5
    assert "envhub_stream_to_asyncio" not in ratios  # no asyncio_stream measured
    assert "websocket_to_websocket" not in ratios


@pytest.mark.parametrize("kind", ["aio", "sync"])
def test_grpc_floor_answers_envhubs_client_like_a_toy_step(kind: str) -> None:
    async def play(target: str) -> list[tuple[str, int]]:
        async with AsyncEnvhubClient(target) as client:
            views = [
                await client.step(session, action) for session, action in (("a", "inc"), ("a", "look"), ("b", "inc"))
            ]
            return [(view.text, view.step_index) for view in views]

    command = [sys.executable, "-m", "envhub.bench.grpc_echo", kind]
    with PortFileProcess(lambda port_file: [*command, port_file]) as server:
        assert asyncio.run(play(server.target)) == [("inc 1", 1), ("look 2", 2), ("inc 1", 1)]


def test_the_servers_compared_are_this_tree_then_the_before_tree_and_this_tree_on_asyncios_loop() -> None:
    assert _served(PercallSettings("out")) == {"envhub": Served()}
    both = _served(PercallSettings("out", before_tree="/tmp/before", asyncio_loop=True))
    assert both == {
        "envhub": Served(),
        "before": Served("/tmp/before"),
        "asyncio": Served(flags=("--event-loop", "asyncio")),
    }
