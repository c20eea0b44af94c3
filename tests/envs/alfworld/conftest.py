"""ALFWorld kinds over generated task sets in a fresh cache, one per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.envs.alfworld.generator.scene import ROOMS, RoomSize
from envhub.envs.alfworld.kind import AlfWorldKind
from envhub.envs.alfworld.taskset import GeneratedTaskSet


def _fresh_kind(tmp_path_factory: pytest.TempPathFactory, room: RoomSize | None = None) -> Iterator[AlfWorldKind]:
    cache: Path = tmp_path_factory.mktemp("alfworld-cache")
    alfworld = AlfWorldKind(taskset=GeneratedTaskSet(seed=0, cache_dir=cache, room=room))
    yield alfworld
    alfworld.close()


@pytest.fixture(scope="module")
def kind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlfWorldKind]:
    """Whole rooms (the default task set)."""
    yield from _fresh_kind(tmp_path_factory)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlfWorldKind]:
    """Small rooms."""
    yield from _fresh_kind(tmp_path_factory, ROOMS["small"])
