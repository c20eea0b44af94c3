"""`AlfWorldKind`: ALFWorld as an envhub environment kind.

The task set is the offline generated one by default; with a `data_path` (or the
`ALFWORLD_DATA` environment variable) the official games under `<data_path>/json_2.1.1`
are served instead, with the same split names. One kind object lives in each worker
process; it installs the engine caches (`memo`) and owns the worker's single
fast-downward library, shared by every session of the worker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, overload

from envhub.core import errors
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.core.settings import whole_number
from envhub.envs.alfworld import memo, parsers
from envhub.envs.alfworld.env import AlfWorldEnv
from envhub.envs.alfworld.experts import EXPERTS
from envhub.envs.alfworld.generator.scene import DEFAULT_ROOMS, ROOMS
from envhub.envs.alfworld.generator.splits import check_index, task_types
from envhub.envs.alfworld.library import SharedDownward
from envhub.envs.alfworld.observed_expert import ORDERS
from envhub.envs.alfworld.taskset import GeneratedTaskSet, OfficialTaskSet, TaskSet, default_cache_root
from envhub.envs.alfworld.translations import TranslationStore

ENV_VERSION = "1"
"""Version of this adapter's behaviour (observations, rewards, native snapshot layout)."""
MAX_SUCCESS_REWARD = 1e6
"""Largest `success_reward` option accepted."""
GC_THRESHOLDS = (50_000, 20, 100)
"""A worker's garbage-collector thresholds: a session's TextWorld state (fact sets, applicable
actions, texts) is thousands of objects, and with Python's (700, 10, 10) full collections over all
of them took over half of a step at 512 sessions (design note 015)."""


def describe(taskset: TaskSet, split: str, index: int) -> TaskSpec:
    """The `TaskSpec` of one game, cheaply: generated games are not made just to be listed.

    A generated game's id and task type follow from (split, index, seed) alone; its goal
    sentence is only known once the game is made, so `description` stays empty (every
    observation carries it as `task_description`). Other task sets are read.
    """
    if isinstance(taskset, GeneratedTaskSet):
        check_index(split, index, taskset.size(split))
        family = task_types(split, taskset.seed)[index]
        return TaskSpec(task_id=f"{split}/{index:05d}", split=split, index=index, family=family)
    game = taskset.game(split, index)
    return TaskSpec(task_id=game.task_id, split=split, index=index, family=game.task_type, description=game.goal)


def prepare_ahead_setting(value: Any) -> int | dict[str, int]:
    """`alfworld.prepare_ahead` as given on the command line: "N" or "SPLIT:N,SPLIT:N"."""
    text = str(value).strip()
    if ":" not in text:
        return whole_number("alfworld.prepare_ahead", text)
    counts: dict[str, int] = {}
    for item in text.split(","):
        split, _, count = item.strip().partition(":")
        if not split or split in counts:
            raise ValueError(f"alfworld.prepare_ahead must be N or SPLIT:N[,SPLIT:N...], each split once; not {text!r}")
        counts[split] = whole_number(f"alfworld.prepare_ahead ({split})", count)
    return counts


class _SplitTasks(Sequence[TaskSpec]):
    """The tasks of one split, described on first access."""

    def __init__(self, taskset: TaskSet, split: str) -> None:
        self._taskset = taskset
        self._split = split
        self._size = taskset.size(split)
        self._specs: dict[int, TaskSpec] = {}

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> TaskSpec: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[TaskSpec]: ...

    def __getitem__(self, index: int | slice) -> TaskSpec | Sequence[TaskSpec]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        if index not in self._specs:
            self._specs[index] = describe(self._taskset, self._split, index)
        return self._specs[index]


def default_taskset(data_path: str | Path | None = None, rooms: str = DEFAULT_ROOMS, seed: int = 0) -> TaskSet:
    """The task set a kind serves when none is given.

    An explicit `data_path` must hold the official games (`<data_path>/json_2.1.1`, or the
    split folders themselves). Without one, `$ALFWORLD_DATA/json_2.1.1` is used when it
    exists (ALFWorld's own layout; the variable alone, as ALFWorld's installer sets it, is
    not enough), else the generated task set with room size `rooms` (a name in `ROOMS`).
    """
    if rooms not in ROOMS:
        raise ValueError(f"alfworld.rooms must be one of {', '.join(ROOMS)}, not {rooms!r}")
    if data_path:
        official = Path(data_path) / "json_2.1.1"
        return OfficialTaskSet(official if official.is_dir() else Path(data_path))
    from_env = os.environ.get("ALFWORLD_DATA")
    if from_env and (Path(from_env) / "json_2.1.1").is_dir():
        return OfficialTaskSet(Path(from_env) / "json_2.1.1")
    return GeneratedTaskSet(seed=seed, room=ROOMS[rooms])


class AlfWorldKind(EnvironmentKind):
    """ALFWorld (TextWorld PDDL engine) with generated or official task sets."""

    name = "alfworld"
    description = "ALFWorld household tasks (TextWorld PDDL engine): six task types, 50 steps, expert hints"
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 50
    gc_thresholds = GC_THRESHOLDS
    gc_freeze_starts = True
    """Closing 128 sessions left no cyclic garbage, 1,600 steps 7 objects (design note 037)."""
    concurrent_starts = True
    """Starts may run beside steps (design note 031): a step touches only its own session's game state and
    caches read or filled whole under the interpreter lock; TextWorld's grammar parsers are per thread
    (`parsers`) and translations one at a time; the native library is used only to plan, which an expert call
    does on the stepping thread, never a start."""
    options: Mapping[str, str] = {
        "expert": f"expert behind expert_actions: {' | '.join(EXPERTS)} (default {EXPERTS[0]}: uses only what the "
        "agent has seen; planner: ALFWorld's optimal planner on the hidden state; handcoded: ALFWorld's heuristic)",
        "expert_order": f"the observed expert's order among equally likely receptacles: {' | '.join(ORDERS)} "
        "(default intro: as the first observation lists them; listed: as the admissible commands list them, which "
        "every prompt shows, so that a model can imitate the expert from its prompt)",
        "success_reward": "reward on success (default 1; 10 as in the ALFWorld papers)",
    }

    config_keys: Mapping[str, str] = {
        "data": "folder of ALFWorld's official games (<data>/json_2.1.1); default: generated games",
        "rooms": "room size of generated games: whole (default: ALFWorld's full floor plans) | small "
        "(5-10 receptacles: short games for tiny models)",
        "seed": "seed of the generated task set (default 0)",
        "prepare_ahead": "generated games to make in the background from the server's start: N (the first N of "
        "every split) or SPLIT:N[,SPLIT:N...] (the first N of the splits named, in that order; e.g. train:128) "
        "each split (default 0: each game is made on first use, in the worker's preparation lane)",
    }

    def __init__(
        self,
        data_path: str | Path | None = None,
        *,
        taskset: TaskSet | None = None,
        rooms: str = DEFAULT_ROOMS,
        seed: int = 0,
        prepare_ahead: int | Mapping[str, int] = 0,
    ) -> None:
        self.taskset = taskset or default_taskset(data_path, rooms, seed)
        self.prepare_ahead: dict[str, int] = (
            {split: prepare_ahead for split in self.taskset.splits()}
            if isinstance(prepare_ahead, int)
            else dict(prepare_ahead)
        )
        """Split -> games `tasks_to_prepare` names from its start (a server makes them in the background)."""
        unknown = sorted(set(self.prepare_ahead) - set(self.taskset.splits()))
        if unknown:
            raise ValueError(f"alfworld.prepare_ahead names unknown split(s) {unknown}; known: {self.taskset.splits()}")
        generated = isinstance(self.taskset, GeneratedTaskSet)
        self._config = (
            {"rooms": rooms, "seed": str(seed)} if generated else {"data": str(data_path or "$ALFWORLD_DATA")}
        )
        if any(self.prepare_ahead.values()):
            self._config["prepare_ahead"] = (
                str(prepare_ahead)
                if isinstance(prepare_ahead, int)
                else ",".join(f"{split}:{count}" for split, count in self.prepare_ahead.items())
            )
        self.version = (
            f"envhub-alfworld{ENV_VERSION}/alfworld-{package_version('alfworld')}/"
            f"textworld-{package_version('textworld')}/"
            f"{self.taskset.version}"
        )
        self._splits = {split: _SplitTasks(self.taskset, split) for split in self.taskset.splits()}
        self._library: SharedDownward | None = None
        cache = self.taskset.cache_dir if isinstance(self.taskset, GeneratedTaskSet) else default_cache_root()
        memo.install(TranslationStore(cache / "translations"))
        parsers.install()  # starts parse on the start thread while steps parse on the stepping one

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AlfWorldKind:
        """From `envhub serve --env alfworld --set alfworld.rooms=small` (keys: `config_keys`)."""
        cls.check_config_keys(config)
        data = config.get("data")
        if data is not None and not Path(str(data)).is_dir():
            raise ValueError(f"alfworld.data={data!r} is not a folder")
        seed = whole_number("alfworld.seed", config.get("seed", 0))
        ahead = prepare_ahead_setting(config.get("prepare_ahead", 0))
        return cls(data, rooms=str(config.get("rooms", DEFAULT_ROOMS)), seed=seed, prepare_ahead=ahead)

    def config(self) -> Mapping[str, str]:
        return dict(self._config)

    def splits(self) -> list[str]:
        return list(self._splits)

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        if split not in self._splits:
            raise errors.not_found(
                f"unknown split {split!r}; known splits: {', '.join(self._splits)}", "UNKNOWN_SPLIT", split=split
            )
        return self._splits[split]

    def task(self, task_id: str) -> TaskSpec:
        """The task with this id (KeyError if unknown), without listing a split."""
        try:
            split, index = self.taskset.locate(task_id)
        except errors.EnvhubError as exc:
            raise KeyError(task_id) from exc
        return self._splits[split][index]

    def prepared(self, task: TaskSpec) -> bool:
        """Official games are files already; a generated game is ready once it is in the cache on disk."""
        if isinstance(self.taskset, GeneratedTaskSet):
            return self.taskset.record_path(task.split, task.index).exists()
        return True

    def prepare(self, task: TaskSpec) -> None:
        """Generate the task's game into the cache on disk (about 0.4 s of CPU for small rooms)."""
        if isinstance(self.taskset, GeneratedTaskSet):
            self.taskset.record(task.split, task.index)

    def tasks_to_prepare(self) -> Sequence[TaskSpec]:
        """The first `prepare_ahead` games of each split it names, in its order (generated task sets only)."""
        if not isinstance(self.taskset, GeneratedTaskSet):
            return []
        return [spec for split, count in self.prepare_ahead.items() for spec in self._splits[split][:count]]

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        expert = options.get("expert", EXPERTS[0])
        if expert not in EXPERTS:
            raise ValueError(f"option expert={expert!r} is not one of {', '.join(EXPERTS)}")
        order = options.get("expert_order", ORDERS[0])
        if order not in ORDERS:
            raise ValueError(f"option expert_order={order!r} is not one of {', '.join(ORDERS)}")
        reward = options.get("success_reward", "1")
        try:
            valid = 0 < float(reward) <= MAX_SUCCESS_REWARD  # also refuses nan and inf
        except ValueError:
            valid = False
        if not valid:
            raise ValueError(
                f"option success_reward={reward!r} must be a finite number in (0, {MAX_SUCCESS_REWARD:g}] "
                "(e.g. 1 or 10)"
            )

    def create(self) -> Environment:
        if self._library is None:
            self._library = SharedDownward()
        return AlfWorldEnv(self.taskset, self._library)

    def close(self) -> None:
        if self._library is not None:
            self._library.close()
            self._library = None
