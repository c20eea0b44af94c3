"""`ToyKind`: a tiny pure-Python environment for tests of servers, clients and adapters.

Serve it by reference: `ServerConfig(environments=("envhub.testing:ToyKind",))` or
`envhub serve --env envhub.testing:ToyKind`; on the wire it is called "toy". It starts in
milliseconds, is deterministic, has an expert and a native snapshot, and one action that
blocks: `wait` opens the FIFO `<gate>/entered` for writing (so a test that opens it for
reading learns the call is inside the environment) and then reads a line from the FIFO
`<gate>/release` (so the test decides when the call finishes). No sleeps, no timing luck.
Make the gate folder with `Gate.create(path)`. With `unprepared` tasks configured, a task is
unprepared until a `prepare` of it went through the same gate (like a game generated on first
use; the mark is a file in the gate folder, so every process sees it). With `held_starts` tasks configured, a
reset onto one of them (a create, reset, restore or fork) goes through the gate (a slow session start), and
`concurrent_starts` lets the worker apply starts on their own thread. Configured `version` (the version it
reports, default "1") and `changed_at` (from that count on the observation text reads differently), it stands
for a new version of itself, with the same or other dynamics (restores across versions). Configured `closes` (a
file), each session's close appends a line "session" to it and the kind's close a line "kind" (how a worker ends).

Episode: the observation is "<task_id> seed <seed>: <count>"; any action but `win` and
`wait` adds one to the count; `win` ends the episode with reward `success_reward`.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envhub.core.environment import (
    Capabilities,
    Environment,
    EnvironmentKind,
    Observation,
    StepResult,
    TaskSpec,
)
from envhub.core.settings import whole_number

REFERENCE = "envhub.testing:ToyKind"
"""What to pass as an environment name to serve the toy kind."""
MAX_REWARD = 1e6


@dataclass(frozen=True)
class Gate:
    """The two FIFOs of the toy kind's blocking `wait` action, seen from the test."""

    folder: Path

    @classmethod
    def create(cls, folder: Path) -> Gate:
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("entered", "release"):
            os.mkfifo(folder / name)
        return cls(folder)

    def wait_entered(self) -> None:
        """Block until a `wait` action is inside the environment."""
        with open(self.folder / "entered", encoding="utf-8") as fifo:
            fifo.read()

    def release(self) -> None:
        """Let the blocked `wait` action finish."""
        with open(self.folder / "release", "w", encoding="utf-8") as fifo:
            fifo.write("go\n")


def wait_until_draining(target: str) -> None:
    """Block until the server at `target` handled its SIGTERM (its health service answers NOT_SERVING)."""
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="envhub.v1.EnvHub")
        while health.Check(request, timeout=30).status == health_pb2.HealthCheckResponse.SERVING:
            pass


class InFlight:
    """`call()` running on its own thread (e.g. a `wait` step held by a `Gate`) while the test goes on."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._outcome.append(call())
        except BaseException as error:  # handed to the test thread by `outcome`
            self._outcome.append(error)

    def outcome(self, timeout: float = 60.0) -> Any:
        """Once the call finished: its result, or the exception it raised (returned, not raised)."""
        self._thread.join(timeout)
        [outcome] = self._outcome
        return outcome


def success_reward(options: Mapping[str, str]) -> float:
    """The `success_reward` option: a finite number in [-1e6, 1e6] (default 1)."""
    text = options.get("success_reward", "1")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and -MAX_REWARD <= value <= MAX_REWARD):
        raise ValueError(f"option success_reward={text!r} must be a finite number in [-{MAX_REWARD:g}, {MAX_REWARD:g}]")
    return value


def pass_gate(gate: Path) -> None:
    """Say so through `<gate>/entered`, then wait for the test's `Gate.release`."""
    with open(gate / "entered", "w", encoding="utf-8") as fifo:
        fifo.write("in\n")
    with open(gate / "release", encoding="utf-8") as fifo:
        fifo.readline()


class ToyEnvironment(Environment):
    """A counter; see the module docstring."""

    def __init__(
        self, gate: Path | None, changed_at: int = 0, held: frozenset[str] = frozenset(), closes: Path | None = None
    ) -> None:
        self._gate = gate
        self._changed_at = changed_at
        self._held = held
        self._closes = closes
        self._task = TaskSpec("", "", 0)
        self._seed = 0
        self._count = 0
        self._reward = 1.0

    def _observation(self, text: str = "") -> Observation:
        body = text or f"{self._task.task_id} seed {self._seed}: {self._count}"
        if not text and 0 < self._changed_at <= self._count:
            body += " (changed)"
        return Observation(body, f"count with {self._task.task_id}", float(self._count), {"count": self._count})

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        if task.task_id in self._held:
            self._block()
        self._task, self._seed, self._count, self._reward = task, seed, 0, success_reward(options)
        return self._observation()

    def step(self, action: str) -> StepResult:
        if action == "win":
            return StepResult(self._observation("you win"), self._reward, terminated=True, won=True)
        if action == "wait":
            self._block()
        else:
            self._count += 1
        return StepResult(self._observation(), 0.0, terminated=False)

    def _block(self) -> None:
        if self._gate is None:
            raise ValueError("the wait action needs the toy kind's `gate` configuration")
        pass_gate(self._gate)

    def admissible_actions(self) -> list[str]:
        return ["inc", "win"]

    def expert_actions(self) -> list[str]:
        return ["win"]

    def native_state(self) -> str:
        return json.dumps({"count": self._count})

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        self.reset(task, seed=seed, options=options)
        self._count = int(json.loads(state)["count"])

    def close(self) -> None:
        _record_close(self._closes, "session")


def _record_close(closes: Path | None, what: str) -> None:
    """Append `what` to the `closes` file, when configured."""
    if closes is not None:
        with closes.open("a", encoding="utf-8") as record:
            record.write(what + "\n")


class ToyKind(EnvironmentKind):
    """Tasks "count/<i>" in splits train and test; configuration `tasks` and `gate`."""

    name = "toy"
    version = "1"
    description = "a deterministic counter for tests (envhub.testing)"
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 20
    options: Mapping[str, str] = {"success_reward": "reward of the `win` action (default 1)"}
    config_keys: Mapping[str, str] = {
        "tasks": "tasks per split (default 4)",
        "gate": "folder holding the FIFOs of the blocking `wait` action (see envhub.testing.Gate)",
        "unprepared": "comma-separated task ids whose preparation blocks on the gate until released",
        "version": "the version this kind reports (default 1)",
        "changed_at": "from this count on, the observation text differs (default 0: never)",
        "held_starts": "comma-separated task ids whose reset (create, reset, restore, fork) blocks on the gate",
        "concurrent_starts": "1: the worker applies session starts on their own thread (default 0)",
        "closes": "file each session's close appends a line 'session' to, and the kind's close a line 'kind'",
    }

    def __init__(
        self,
        tasks: int = 4,
        gate: str | None = None,
        unprepared: str = "",
        version: str = "1",
        changed_at: int = 0,
        held_starts: str = "",
        concurrent_starts: bool = False,
        closes: str | None = None,
    ) -> None:
        if tasks < 1:
            raise ValueError(f"toy.tasks must be at least 1, not {tasks}")
        self._gate = Path(gate) if gate else None
        self._tasks = {
            split: [TaskSpec(f"{split}-count/{index}", split, index, "count") for index in range(tasks)]
            for split in ("train", "test")
        }
        self._unprepared = frozenset(filter(None, unprepared.split(",")))
        self._held = frozenset(filter(None, held_starts.split(",")))
        if (self._unprepared or self._held) and self._gate is None:
            raise ValueError("toy.unprepared and toy.held_starts need toy.gate")
        self.concurrent_starts = concurrent_starts
        self._closes = Path(closes) if closes else None
        self.version = version
        self._changed_at = changed_at
        self._config = {
            "tasks": str(tasks),
            **({"gate": gate} if gate else {}),
            **({"changed_at": str(changed_at)} if changed_at else {}),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        cls.check_config_keys(config)
        tasks = whole_number("toy.tasks", config.get("tasks", 4), least=1)
        changed_at = whole_number("toy.changed_at", config.get("changed_at", 0), least=0)
        version = str(config.get("version", "1"))
        held, concurrent = (
            str(config.get("held_starts", "")),
            str(config.get("concurrent_starts", "0")).lower() in ("1", "true"),
        )
        unprepared, closes = str(config.get("unprepared", "")), config.get("closes")
        return cls(tasks, config.get("gate"), unprepared, version, changed_at, held, concurrent, closes)

    def config(self) -> Mapping[str, str]:
        return dict(self._config)

    def splits(self) -> list[str]:
        return list(self._tasks)

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        return self._tasks[split]

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        success_reward(options)

    def _mark(self, task: TaskSpec) -> Path:
        return Path(str(self._gate)) / f"prepared-{task.task_id.replace('/', '-')}"

    def prepared(self, task: TaskSpec) -> bool:
        return task.task_id not in self._unprepared or self._mark(task).exists()

    def prepare(self, task: TaskSpec) -> None:
        if not self.prepared(task) and self._gate is not None:
            pass_gate(self._gate)
            self._mark(task).touch()

    def create(self) -> Environment:
        return ToyEnvironment(self._gate, self._changed_at, self._held, self._closes)

    def close(self) -> None:
        _record_close(self._closes, "kind")
