"""Generate ALFWorld games in bulk into the task-set cache.

python -m envhub.envs.alfworld.generator --split train --count 3553 --workers 2
python -m envhub.envs.alfworld.generator --split train --count 128 --rooms small   # what the trainer's servers serve
python -m envhub.envs.alfworld.generator --stats 60     # docs/results/alfworld-taskset.{json,md}
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from envhub.envs.alfworld.generator.bulk import make_all
from envhub.envs.alfworld.generator.scene import DEFAULT_ROOMS, ROOMS
from envhub.envs.alfworld.generator.stats import stats_jobs, write_stats
from envhub.envs.alfworld.taskset import GeneratedTaskSet


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", action="append", help="split(s) to generate (default: all three)")
    parser.add_argument("--count", type=int, default=0, help="games per split from --start (default: the whole split)")
    parser.add_argument("--start", type=int, default=0, help="first index")
    parser.add_argument("--seed", type=int, default=0, help="task-set seed")
    parser.add_argument("--rooms", choices=sorted(ROOMS), default=DEFAULT_ROOMS, help="room size (alfworld.rooms)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--cache-dir", type=Path, default=None, help="cache root (default: $ENVHUB_CACHE/alfworld)")
    parser.add_argument("--stats", type=int, default=0, metavar="N", help="instead: statistics over N train games/type")
    parser.add_argument("--out", type=Path, default=Path("docs/results"), help="where --stats writes its files")
    args = parser.parse_args(argv)

    room = ROOMS[args.rooms]
    taskset = GeneratedTaskSet(seed=args.seed, cache_dir=args.cache_dir, room=room)
    if args.stats:
        jobs = stats_jobs(args.seed, args.stats)
    else:
        jobs = []
        for split in args.split or taskset.splits():
            end = taskset.size(split) if args.count <= 0 else min(taskset.size(split), args.start + args.count)
            jobs += [(split, index) for index in range(args.start, end)]

    started = time.perf_counter()
    made = make_all(jobs, args.seed, args.cache_dir, args.workers, room)
    elapsed = time.perf_counter() - started
    print(f"{len(made)} games in {elapsed:.1f} s ({args.workers} workers) into {taskset.cache_dir}")
    print(f"draws per kept game: {sum(m.attempts for m in made) / max(1, len(made)):.2f}")
    print(f"per type: {dict(sorted(Counter(m.task_type for m in made).items()))}")
    if args.stats:
        for path in write_stats(made, taskset, elapsed, args.workers, args.out):
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
