"""Shared trainer fixtures: tiny models made offline once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.models.tiny import TinyModels, TinySpec, make_tiny_models
from trainer.prompts import PastStep, PromptRenderer, PromptState
from trainer.rollout.local_server import LocalServer

ROOMS = ("cabinet 1", "countertop 1", "fridge 1", "sinkbasin 1", "drawer 2", "shelf 3")
ITEMS = ("apple 1", "mug 2", "knife 1", "lettuce 1", "soapbar 3")


def corpus() -> list[str]:
    """ALFWorld-like text in every template, enough for a byte-level BPE."""
    texts = []
    for style in ("atod", "compact"):
        renderer = PromptRenderer("alfworld", style=style, history_length=2)
        for i, room in enumerate(ROOMS):
            item = ITEMS[i % len(ITEMS)]
            actions = [f"go to {r}" for r in ROOMS] + [f"take {item} from {room}", "look", "inventory"]
            state = PromptState(
                task_description=f"put some {item.split()[0]} in {ROOMS[(i + 2) % len(ROOMS)]}",
                observation=f"You arrive at {room}. On the {room}, you see a {item}.",
                admissible=actions,
                past=[PastStep(f"You are in the middle of a room. You see a {room}.", f"go to {room}")],
            )
            texts.append(renderer.render(state))
            texts += [f"<think>I need the {item}.</think><action>{a}</action>" for a in actions]
    return texts


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """A random student (hidden 64, 2 layers) and teacher (hidden 128, 2 layers) sharing one tokenizer."""
    out: Path = tmp_path_factory.mktemp("tiny-models")
    return make_tiny_models(out, corpus(), student=TinySpec(64, 2), teacher=TinySpec(128, 2), vocab_size=600)


@pytest.fixture(scope="session")
def alfworld_server() -> Iterator[str]:
    """A real envhub ALFWorld server in a child process on a free loopback port."""
    pytest.importorskip("alfworld")
    with LocalServer("alfworld") as server:
        yield server.address


@pytest.fixture(scope="session")
def webshop_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real envhub WebShop server; its search index is built under a temporary cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_CACHE", str(tmp_path_factory.mktemp("webshop-cache")))
        with LocalServer("webshop") as server:
            yield server.address
