"""OPD on a model ladder, several seeds: the student's held-out success before and after each run.

    python -m trainer.experiments.ladder_opd --ladder searchqa --seeds 0 1 2 --steps 16 --out docs/results

Each seed trains the ladder's student with its config (`trainer train`, OPD against the ladder's teacher, the
seed setting task order and sampling) into `runs/ladder-opd/NAME/seedK`, then the start and every seed's final
weights are evaluated on the ladder's mixed held-out set (`trainer.models.ladder.evaluate_ladder`, one local
server). Writes `ladder-opd-NAME.json` and `.md` (one row per seed) into `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.models.ladder import LadderSpec, evaluate_ladder


def run(spec: LadderSpec, seeds: Sequence[int], steps: int, runs_dir: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """Train one run per seed and evaluate the start and each run's final weights; the result record."""
    from trainer.driver import train

    config = spec.trainer_config(overrides)
    policies: dict[str, str] = {"start": str(config.models.student), "teacher": str(config.models.teacher)}
    walls: dict[str, float] = {}
    for seed in seeds:
        out = runs_dir / f"seed{seed}"
        started = time.perf_counter()
        seeded = spec.trainer_config([*overrides, f"seed={seed}", f"steps={steps}", f"output_dir={out}"])
        result = train(seeded, progress=False)
        if result.checkpoint is None:
            raise RuntimeError(f"seed {seed}: the run saved no checkpoint")
        policies[f"seed{seed}"] = result.checkpoint
        walls[f"seed{seed}"] = round(time.perf_counter() - started, 1)
    figures = evaluate_ladder(spec, policies, overrides)
    return {
        "ladder": spec.name,
        "config": spec.config,
        "objective": config.objective.name,
        "steps": steps,
        "seeds": list(seeds),
        "overrides": list(overrides),
        "held_out": figures,
        "train_wall_s": walls,
        "load_average": list(os.getloadavg()),
    }


def markdown(record: dict[str, Any], command: str) -> str:
    """The result page: one row per seed, the start and the teacher beside them."""
    held = record["held_out"]
    start = held["start"]["success"]
    lines = [
        f"# OPD on the {record['ladder']} ladder: {record['steps']} steps, {len(record['seeds'])} seeds",
        "",
        f"Config `{record['config']}` (objective `{record['objective']}`), models from "
        f"trainer/configs/ladder/{record['ladder']}.yaml; held-out success on the ladder's mixed held-out set "
        f"({int(held['start']['tasks'])} tasks, one episode each, the config's eval temperature).",
        "",
        "    " + command,
        "",
        "| policy | held-out success | change from the start | mean turns | train wall s |",
        "|---|---|---|---|---|",
    ]
    for name, figure in held.items():
        change = "" if name in ("start", "teacher") else f"{figure['success'] - start:+.3f}"
        wall = record["train_wall_s"].get(name, "")
        lines.append(f"| {name} | {figure['success']:.3f} | {change} | {figure['mean_turns']:.2f} | {wall} |")
    load = ", ".join(f"{value:.1f}" for value in record["load_average"])
    lines += ["", f"Load average at the end (1/5/15 min): {load} on 2 shared cores.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m trainer.experiments.ladder_opd`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", required=True, help="trainer/configs/ladder/NAME.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("docs/results"))
    parser.add_argument("--runs", type=Path, help="run folders (default runs/ladder-opd/NAME)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    spec = LadderSpec.load(args.ladder)
    record = run(spec, args.seeds, args.steps, args.runs or Path("runs/ladder-opd") / spec.name, args.overrides)
    command = "python -m trainer.experiments.ladder_opd " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"ladder-opd-{spec.name}"
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(record, command))
    print(json.dumps(record["held_out"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
