"""ALFWorld task sets: generated offline (the default) or read from the official ALFWorld data.

Both answer the same questions: which splits, how many games, and game (split, index) as an
`AlfredGame` holding the ALFWorld game dict (what a `game.tw-pddl` file contains) and the
traj_data (what ALFWorld's handcoded expert reads).

Generated games are cached on disk, one small JSON per game; the PDDL domain and the grammar
are stored once per task set:

    <cache root>/<version>/alfred.pddl, alfred.twl2     shared by every game
    <cache root>/<version>/<split>/<index>.json         one game (problem, goal, walkthrough, traj_data)
    <cache root>/<version>/files/<split>/<index>/       game.tw-pddl + traj_data.json, made by `game_path`

The cache root is `$ENVHUB_CACHE/alfworld` or `~/.cache/envhub/alfworld`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import alfworld.info

from envhub.core.errors import failed_precondition, not_found
from envhub.envs.alfworld.generator.build import GENERATOR_VERSION, GameRecord, game_json, generate
from envhub.envs.alfworld.generator.scene import RoomSize
from envhub.envs.alfworld.generator.splits import SPLITS, check_index, check_split, split_size
from envhub.envs.alfworld.generator.tasks import TASK_TYPES


@dataclass(frozen=True)
class AlfredGame:
    """One ALFWorld game, ready to load into `textworld.envs.PddlEnv`."""

    task_id: str
    """"train/00042" (generated) or the trial folder relative to the official root."""
    split: str
    index: int
    task_type: str
    """One of `TASK_TYPES`."""
    floorplan: str
    """THOR scene, e.g. "FloorPlan12"."""
    goal: str
    """ALFWorld goal sentence with its final period, e.g. "put a clean apple in fridge."."""
    game_json: dict[str, Any]
    """The ALFWorld game dict: pddl_domain, grammar (goal inserted), pddl_problem, solvable, walkthrough."""
    traj_data: dict[str, Any]
    """ALFRED's traj_data subset: task_type, pddl_params, scene (what the handcoded expert reads)."""
    path: str = ""
    """The game.tw-pddl file when the game comes from files on disk (official data); empty otherwise."""


class TaskSet(Protocol):
    """What the ALFWorld environment needs from a task set."""

    version: str
    """Identifies the games; goes into the environment kind's version, so snapshots check it."""

    def splits(self) -> list[str]:
        """Split names in canonical order."""
        ...

    def size(self, split: str) -> int:
        """Number of games in `split`."""
        ...

    def game(self, split: str, index: int) -> AlfredGame:
        """Game `index` of `split` (deterministic)."""
        ...

    def locate(self, task_id: str) -> tuple[str, int]:
        """(split, index) of a task id; NOT_FOUND when unknown."""
        ...


def default_cache_root() -> Path:
    """`$ENVHUB_CACHE/alfworld`, or `~/.cache/envhub/alfworld`."""
    base = os.environ.get("ENVHUB_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "envhub") / "alfworld"


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` so that concurrent readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


GAMES_KEPT = 256
"""Generated games a task set keeps in memory (a whole-room game is about 50 KB)."""


@functools.cache
def _shared_text(path: str) -> str:
    return Path(path).read_text()


class GeneratedTaskSet:
    """The offline default: games made by `envhub.envs.alfworld.generator` on demand and cached on disk."""

    def __init__(self, seed: int = 0, cache_dir: Path | None = None, room: RoomSize | None = None) -> None:
        self.seed = seed
        self.room = room or RoomSize()
        self.version = f"alfgen{GENERATOR_VERSION}-seed{seed}-{self.room.tag()}"
        self.cache_dir = (cache_dir or default_cache_root()) / self.version
        """Where this task set's games live (versioned)."""
        self._games: OrderedDict[tuple[str, int], AlfredGame] = OrderedDict()
        self.domain = _shared_text(alfworld.info.ALFRED_PDDL_PATH)
        self.grammar = _shared_text(alfworld.info.ALFRED_TWL2_PATH)
        for name, text in (("alfred.pddl", self.domain), ("alfred.twl2", self.grammar)):
            shared = self.cache_dir / name
            if not shared.exists() or shared.read_text() != text:
                _write_atomic(shared, text)

    def splits(self) -> list[str]:
        """["train", "valid_seen", "valid_unseen"]."""
        return list(SPLITS)

    def size(self, split: str) -> int:
        """ALFWorld's split sizes: 3553 / 140 / 134."""
        return split_size(split)

    def record_path(self, split: str, index: int) -> Path:
        """The cache file of one game."""
        return self.cache_dir / split / f"{index:05d}.json"

    def record(self, split: str, index: int) -> GameRecord:
        """The cached record of a game, generating (and caching) it on a miss."""
        check_index(split, index, self.size(split))
        path = self.record_path(split, index)
        if path.exists():
            return GameRecord.from_json(json.loads(path.read_text()))
        record = generate(split, index, self.seed, self.domain, self.grammar, self.room)
        _write_atomic(path, json.dumps(record.to_json(), indent=1))
        return record

    def game(self, split: str, index: int) -> AlfredGame:
        """Game `index` of `split`; generated and cached on first use (the last `GAMES_KEPT` are kept in memory,
        shared by every session on them)."""
        kept = self._games.get((split, index))
        if kept is not None:
            self._games.move_to_end((split, index))
            return kept
        game = self._make_game(split, index)
        self._games[(split, index)] = game
        while len(self._games) > GAMES_KEPT:
            self._games.popitem(last=False)
        return game

    def _make_game(self, split: str, index: int) -> AlfredGame:
        record = self.record(split, index)
        return AlfredGame(
            task_id=f"{split}/{index:05d}",
            split=split,
            index=index,
            task_type=record.task_type,
            floorplan=record.floorplan,
            goal=record.goal,
            game_json=game_json(self.domain, self.grammar, record),
            traj_data=record.traj_data,
        )

    def locate(self, task_id: str) -> tuple[str, int]:
        """ "train/00042" -> ("train", 42)."""
        split, _, number = task_id.partition("/")
        check_split(split)
        if not number.isdigit():
            raise not_found(f"no ALFWorld task {task_id!r}; ids look like 'train/00042'", "TASK_NOT_FOUND")
        check_index(split, int(number), self.size(split))
        return split, int(number)


_GOAL = re.compile(r"Your task is to: (.*?)\"")
_SOLVABLE = re.compile(r'"solvable"\s*:\s*true')
"""ALFWorld's own filter (the key must be there and true), as text: parsing every file would take much longer."""


def official_goal(grammar: str) -> str:
    """The goal sentence ALFWorld inserted into a game's grammar."""
    found = _GOAL.search(grammar)
    return found.group(1) if found else ""


class OfficialTaskSet:
    """ALFWorld's own games: `<root>/{train,valid_seen,valid_unseen}/<task>/<trial>/game.tw-pddl`.

    `root` is `$ALFWORLD_DATA/json_2.1.1`. The games are those ALFWorld's `AlfredTWEnv.collect_game_files`
    keeps: the six task types, no movable-receptacle or sliced tasks, a game file marked solvable. The
    listing is made once, in sorted path order, and kept in memory.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        present = [s for s in SPLITS if (self.root / s).is_dir()]
        if not present:
            raise failed_precondition(
                f"no ALFWorld data under {self.root}: expected {'/'.join(SPLITS)} folders "
                "(point the server at $ALFWORLD_DATA/json_2.1.1)",
                "OFFICIAL_DATA_MISSING",
            )
        self._games = {split: self._scan(split) for split in present}
        self.version = f"official-{self.root.name}-" + "-".join(str(len(self._games[s])) for s in present)

    def _scan(self, split: str) -> list[Path]:
        found = []
        for task_dir in sorted((self.root / split).iterdir()):
            task_type = task_dir.name.split("-", 1)[0]
            if task_type not in TASK_TYPES or "movable" in task_dir.name or "Sliced" in task_dir.name:
                continue
            for game_file in sorted(task_dir.glob("*/game.tw-pddl")):
                if _SOLVABLE.search(game_file.read_text()):
                    found.append(game_file)
        return found

    def splits(self) -> list[str]:
        """The official splits present under the root, in canonical order."""
        return list(self._games)

    def size(self, split: str) -> int:
        """Solvable games of the six task types in `split`."""
        return len(self._split(split))

    def _split(self, split: str) -> list[Path]:
        check_split(split)
        if split not in self._games:
            raise not_found(f"split {split!r} is not present under {self.root}", "UNKNOWN_SPLIT", split=split)
        return self._games[split]

    def game(self, split: str, index: int) -> AlfredGame:
        """Read game `index` of `split` and its traj_data.json."""
        games = self._split(split)
        check_index(split, index, len(games))
        game_file = games[index]
        data = json.loads(game_file.read_text())
        traj_data = json.loads((game_file.parent / "traj_data.json").read_text())
        return AlfredGame(
            task_id=str(game_file.parent.relative_to(self.root)),
            split=split,
            index=index,
            task_type=traj_data["task_type"],
            floorplan=traj_data.get("scene", {}).get("floor_plan", ""),
            goal=official_goal(data["grammar"]),
            game_json=data,
            traj_data=traj_data,
            path=str(game_file),
        )

    def locate(self, task_id: str) -> tuple[str, int]:
        """ "<split>/<task>/<trial>" -> (split, index)."""
        split = task_id.split("/", 1)[0]
        wanted = self.root / task_id.rstrip("/") / "game.tw-pddl"
        if split in self._games and wanted in self._games[split]:
            return split, self._games[split].index(wanted)
        raise not_found(f"no official ALFWorld game {task_id!r} under {self.root}", "TASK_NOT_FOUND")


def game_path(game: AlfredGame, cache_dir: Path | None = None) -> Path:
    """A game.tw-pddl file for `game`, with traj_data.json beside it (ALFWorld's handcoded expert reads it).

    Official games are already files; generated ones are written once under
    `<cache_dir>/files/<split>/<index>/` (`cache_dir`: the task set's `cache_dir`).
    """
    if game.path:
        return Path(game.path)
    if cache_dir is None:
        raise ValueError(f"game {game.task_id} is not on disk: pass the task set's cache_dir")
    folder = cache_dir / "files" / game.split / f"{game.index:05d}"
    path = folder / "game.tw-pddl"
    if not path.exists():
        _write_atomic(folder / "traj_data.json", json.dumps(game.traj_data))
        _write_atomic(path, json.dumps(game.game_json))
    return path
