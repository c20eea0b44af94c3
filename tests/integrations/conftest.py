"""Shared fixtures: one real envhub ALFWorld server (a child process on a free loopback port), a tiny model.

The adapters' tests also run in each framework's own venv (`make test-adapters`), which holds
envhub and that framework only: there the server runs on the Python named by
`ENVHUB_SERVER_PYTHON` (the main venv, which has ALFWorld), as a separate service would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.client import EnvView
from envhub.integrations.text import render_turn

SERVER_PYTHON = os.environ.get("ENVHUB_SERVER_PYTHON") or sys.executable


def _port(process: subprocess.Popen[bytes], port_file: Path) -> int:
    """The port `envhub serve --port-file` wrote once serving (it writes "<port>\\n")."""
    while process.poll() is None:
        try:
            process.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            text = port_file.read_text() if port_file.exists() else ""
            if text.endswith("\n"):
                return int(text)
    raise RuntimeError(f"the ALFWorld server exited with {process.returncode} before serving")


@pytest.fixture(scope="session")
def alfworld_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if sys.executable == SERVER_PYTHON:
        pytest.importorskip("alfworld")
    port_file = tmp_path_factory.mktemp("alfworld-server") / "port"
    command = [SERVER_PYTHON, "-m", "envhub.cli", "serve", "--env", "alfworld", "--port", "0"]
    command += ["--host", "localhost", "--port-file", str(port_file), "--set", "alfworld.rooms=small"]
    process = subprocess.Popen(command)
    try:
        yield f"localhost:{_port(process, port_file)}"
    finally:
        process.terminate()
        process.wait(timeout=60)


EXPERT_TASK = "train/00000"


@pytest.fixture(scope="session")
def expert_plan(alfworld_target: str) -> list[str]:
    """The expert's winning actions for EXPERT_TASK (seed 0) on the shared server, from a session of its own."""
    from envhub.client import Sessions

    sessions = Sessions.connect(alfworld_target, "alfworld")
    turn, plan = sessions.start(EXPERT_TASK), []
    while not turn.done:
        plan.append(sessions.expert(turn.session_id)[0])
        turn = sessions.step(turn.session_id, plan[-1])
    sessions.end(turn.session_id)
    sessions.close()
    return plan


def _corpus() -> list[str]:
    rooms = ["cabinet 1", "countertop 1", "fridge 1", "sinkbasin 1", "drawer 2"]
    admissible = tuple(f"go to {r}" for r in rooms)
    turn = EnvView("s", "You are in the middle of a room.", "put a clean mug in cabinet", admissible)
    return [render_turn(turn)] + [f"<action>go to {r}</action> take mug 1 from {r}" for r in rooms]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen3 (hidden 32, 1 layer) and its tokenizer, made offline."""
    pytest.importorskip("torch")
    from trainer.models.tiny import TinySpec, make_tiny_models

    out = tmp_path_factory.mktemp("integrations-tiny")
    return make_tiny_models(out, _corpus(), student=TinySpec(32, 1), vocab_size=400).student
