"""Shared trainer fixtures: tiny models made offline once per session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.config import TrainerConfig, config_from_dict
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
def alfworld_config(tiny_models: TinyModels) -> Callable[..., TrainerConfig]:
    """`build(server, **sections)`: a small trainer config for the tiny models on an ALFWorld server (CPU, compact
    prompts, 3-turn episodes). A section given as a dict updates the base section of that name key by key; any
    other keyword (a top-level value, or a section the base lacks) is set as given."""

    def build(server: str, **sections: Any) -> TrainerConfig:
        data: dict[str, Any] = {
            "models": {"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)},
            "backend": {"device": "cpu"},
            "env": {"name": "alfworld", "targets": [server], "max_turns": 3, "families": ["pick_and_place_simple"],
                    "max_tasks": 8},
            "prompt": {"style": "compact", "history_length": 1, "max_prompt_tokens": 256},
            "rollout": {"group_size": 2, "tasks_per_step": 2, "max_new_tokens": 8},
            "optim": {"lr": 1e-3},
        }  # fmt: skip
        for name, value in sections.items():
            base = data.get(name)
            data[name] = {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
        return config_from_dict(data)

    return build


@pytest.fixture(scope="session")
def alfworld_server() -> Iterator[str]:
    """A real envhub ALFWorld server (short games: small rooms) in a child process on a free loopback port."""
    pytest.importorskip("alfworld")
    with LocalServer("alfworld", settings={"rooms": "small"}) as server:
        yield server.address


@pytest.fixture(scope="session")
def webshop_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real envhub WebShop server; its search index is built under a temporary cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVHUB_CACHE", str(tmp_path_factory.mktemp("webshop-cache")))
        with LocalServer("webshop") as server:
            yield server.address
