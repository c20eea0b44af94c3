"""A worker freezes what each session start leaves when its kind says so (`EnvironmentKind.gc_freeze_starts`,
design note 037): the started session is outside the collector's generations, so no later collection walks it,
and the start's cyclic garbage was collected first, not frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from envhub.core.environment import Environment
from envhub.server import worker_ops as ops
from envhub.server.worker_process import WorkerState
from envhub.testing import ToyKind


class Cycle:
    """An object that refers to itself: garbage only a collection frees."""

    def __init__(self) -> None:
        self.me = self


class LitteringToy(ToyKind):
    """The toy kind whose every environment is made beside a garbage cycle (as an ALFWorld game load leaves)."""

    def __init__(self, freeze: bool) -> None:
        super().__init__()
        self.gc_freeze_starts = freeze
        self.litter: list[weakref.ref[Cycle]] = []

    def create(self) -> Environment:
        self.litter.append(weakref.ref(Cycle()))
        return super().create()


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.collect()
    yield
    gc.unfreeze()


def tracked(target: object) -> bool:
    """Whether `target` is in one of the collector's generations (not frozen)."""
    return any(candidate is target for candidate in gc.get_objects())


def started(kind: LitteringToy) -> Environment:
    """A session created in a worker of `kind`: its environment."""
    state = WorkerState(kind)
    state.handle(ops.Create("s1", "train-count/0", 0, {}, 10, False))
    return state.sessions["s1"].env


def test_a_start_is_frozen_after_its_garbage_is_collected() -> None:
    kind = LitteringToy(freeze=True)
    env = started(kind)
    assert not tracked(env), "the started session's environment is frozen"
    assert kind.litter[0]() is None, "the start's garbage cycle was collected, not frozen"


def test_a_kind_that_does_not_ask_is_not_frozen() -> None:
    env = started(LitteringToy(freeze=False))
    assert tracked(env) and gc.get_freeze_count() == 0
