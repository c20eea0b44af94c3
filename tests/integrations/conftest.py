"""Shared fixtures: one real envhub ALFWorld server (a child process on a free loopback port), a tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.integrations.episodes import EnvView
from envhub.integrations.trl import render_turn
from trainer.models.tiny import TinySpec, make_tiny_models
from trainer.rollout.local_server import LocalServer


@pytest.fixture(scope="session")
def alfworld_target() -> Iterator[str]:
    pytest.importorskip("alfworld")
    with LocalServer("alfworld") as server:
        yield server.address


def _corpus() -> list[str]:
    rooms = ["cabinet 1", "countertop 1", "fridge 1", "sinkbasin 1", "drawer 2"]
    admissible = tuple(f"go to {r}" for r in rooms)
    turn = EnvView("s", "You are in the middle of a room.", "put a clean mug in cabinet", admissible)
    return [render_turn(turn)] + [f"<action>go to {r}</action> take mug 1 from {r}" for r in rooms]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen3 (hidden 32, 1 layer) and its tokenizer, made offline."""
    out = tmp_path_factory.mktemp("integrations-tiny")
    return make_tiny_models(out, _corpus(), student=TinySpec(32, 1), vocab_size=400).student
