"""`envhub prepare`: build an environment's task data into a cache before any server needs it.

A server (`envhub serve`), the image build (deploy/docker/prepare.sh) and a Kubernetes init
container all read one cache folder, `$ENVHUB_CACHE` (`--cache` sets it). Preparing has two parts:

* the data every task shares, built when the kind is constructed (WebShop's catalogue and BM25
  index, Search-QA's corpus, questions and index; ScienceWorld and official ALFWorld games need
  nothing): one process, as those builds are single-threaded;
* per-task work (`EnvironmentKind.prepare`: ALFWorld's generated games, ~0.55 CPU-s each), spread
  over `workers` processes (default: every core) at a lower CPU priority (`NICENESS`), so that the
  sessions of a server already playing on the machine keep their steps' pace.

Tasks already prepared are skipped, so a rerun only fills what is missing (e.g. after an image
built with a few games per split).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.core.environment import EnvironmentKind, TaskSpec
from envhub.core.registry import build_kind
from envhub.server.preparer import NICENESS

CACHE_ENV = "ENVHUB_CACHE"
"""The variable every kind reads its cache root from (default `~/.cache/envhub`)."""

_kind: EnvironmentKind | None = None


@dataclass(frozen=True)
class PrepareReport:
    """What one `prepare` did."""

    environment: str
    cache: str
    tasks: int
    """Tasks chosen (prepared before or now)."""
    made: int
    """Tasks that were not prepared yet, prepared by this run."""
    workers: int
    seconds: float
    """Wall time, the shared data's build included."""


def parse_counts(text: str) -> int | dict[str, int]:
    """`--tasks` as given: "N" (the first N of every split; 0 = all) or "SPLIT:N[,SPLIT:N...]"."""
    if ":" not in text:
        return _count(text, text)
    counts: dict[str, int] = {}
    for item in text.split(","):
        split, _, count = item.strip().partition(":")
        if not split or split in counts:
            raise ValueError(f"--tasks must be N or SPLIT:N[,SPLIT:N...], each split once; not {text!r}")
        counts[split] = _count(count, text)
    return counts


def _count(value: str, text: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"--tasks must be N or SPLIT:N[,SPLIT:N...] with whole numbers; not {text!r}")
    return int(value)


def chosen_tasks(kind: EnvironmentKind, counts: int | Mapping[str, int]) -> list[TaskSpec]:
    """The first `count` tasks of each split named (an int: of every split; 0: the whole split)."""
    wanted = {split: counts for split in kind.splits()} if isinstance(counts, int) else dict(counts)
    unknown = sorted(set(wanted) - set(kind.splits()))
    if unknown:
        raise ValueError(f"unknown split(s) {unknown}; {kind.name} has {kind.splits()}")
    chosen: list[TaskSpec] = []
    for split, count in wanted.items():
        tasks = kind.tasks(split)
        chosen += list(tasks[: count or len(tasks)])
    return chosen


def _init_worker(environment: str, config: Mapping[str, Any], niceness: int) -> None:
    """Pool initializer: a lower priority, then one instance of the kind per process."""
    global _kind
    os.nice(niceness)
    _kind = build_kind(environment, config)


def _prepare_one(task_id: str) -> str:
    if _kind is None:
        raise RuntimeError("_prepare_one runs in pool workers set up by _init_worker()")
    _kind.prepare(_kind.task(task_id))
    return task_id


def prepare(
    environment: str,
    config: Mapping[str, Any] | None = None,
    *,
    cache: str | Path | None = None,
    counts: int | Mapping[str, int] = 0,
    workers: int | None = None,
    niceness: int = NICENESS,
    progress: bool = False,
) -> PrepareReport:
    """Build `environment`'s data (with server settings `config`) into `cache` (default `$ENVHUB_CACHE`).

    `counts`: which tasks (`chosen_tasks`; 0: every task of every split). `workers`: processes for
    the per-task work (default: every core of this process's CPU set), `niceness` lower in priority."""
    started = time.perf_counter()
    if cache is not None:
        os.environ[CACHE_ENV] = str(Path(cache).resolve())  # this process's kind and the pool's processes
    settings = dict(config or {})
    workers = workers or len(os.sched_getaffinity(0))
    kind = build_kind(environment, settings)  # builds the shared data (catalogue, corpus, index)
    try:
        tasks = chosen_tasks(kind, counts)
        missing = [task.task_id for task in tasks if not kind.prepared(task)]
    finally:
        kind.close()
    if missing:
        context = multiprocessing.get_context("spawn")  # no fork of a process holding native libraries
        with context.Pool(min(workers, len(missing)), _init_worker, (environment, settings, niceness)) as pool:
            for done, _ in enumerate(pool.imap_unordered(_prepare_one, missing), 1):
                if progress and (done % 100 == 0 or done == len(missing)):
                    print(f"{done}/{len(missing)} tasks, {time.perf_counter() - started:.0f} s", flush=True)
    where = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "envhub")
    return PrepareReport(environment, where, len(tasks), len(missing), workers, time.perf_counter() - started)


def prepare_parser(sub: Any) -> None:
    """The `envhub prepare` subcommand's arguments."""
    p = sub.add_parser("prepare", help="build an environment's task data into a cache (games, catalogue, index)")
    p.add_argument("--env", required=True, help="environment, e.g. alfworld")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ENV.KEY=VALUE",
        help="an environment setting, as for `envhub serve` (e.g. alfworld.rooms=small): prepare what such a "
        "server serves (repeatable)",
    )
    p.add_argument("--env-config", action="append", default=[], help="YAML of settings, as for `envhub serve`")
    p.add_argument("--cache", default=None, help=f"cache folder (default ${CACHE_ENV}, else ~/.cache/envhub)")
    p.add_argument(
        "--tasks",
        default="0",
        help="N (the first N tasks of every split; 0, the default: all) or SPLIT:N[,SPLIT:N...] (e.g. train:128)",
    )
    p.add_argument("--workers", type=int, default=None, help="processes for per-task work (default: every core)")
    p.add_argument(
        "--niceness",
        type=int,
        default=NICENESS,
        help=f"how much lower their CPU priority is (default {NICENESS}, as a server's preparation lane: a server "
        "playing on the same machine keeps its pace; 0 on a machine doing nothing else, e.g. an image build)",
    )


def run(args: Any) -> int:
    """`envhub prepare`: prints what it did; 2 on a bad setting."""
    from envhub.server.env_config import environment_config

    try:
        settings = environment_config((args.env,), args.env_config, args.set).get(args.env, {})
        counts = parse_counts(args.tasks)
        report = prepare(
            args.env,
            settings,
            cache=args.cache,
            counts=counts,
            workers=args.workers,
            niceness=args.niceness,
            progress=True,
        )
    except (ValueError, KeyError) as error:
        print(f"cannot prepare: {error}")
        return 2
    print(
        f"{report.environment}: {report.tasks} tasks ready in {report.cache} ({report.made} made now, "
        f"{report.workers} workers, {report.seconds:.1f} s)"
    )
    return 0
