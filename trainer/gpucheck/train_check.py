"""gpu-check stage `train`: a real ATOD run of a few steps with the hf backend on the device, in one process
(Ray off: the image has no Ray), against a local envhub ALFWorld server this stage starts: rollouts over
gRPC, teacher scores, learner updates (gradient checkpointing, chunked log-probs), weight pushes, metrics
and a final checkpoint whose weights differ from the initial student's. The run's output folder is made
afresh (the orchestrator empties the stage's folder too): metrics a previous run left are never counted.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import torch

from trainer.gpucheck.common import Stage, stage_main

STEPS = {"cuda": 3, "cpu": 2}


def run(stage: Stage) -> None:
    os.environ.setdefault("ENVHUB_CACHE", str(stage.out / "envhub-cache"))  # ALFWorld's generated games
    from trainer.config import config_from_dict
    from trainer.driver import train
    from trainer.models.corpus import SEED_TEXTS
    from trainer.models.loading import load_model
    from trainer.models.tiny import TinySpec, make_tiny_models

    models = make_tiny_models(stage.out / "train-models", SEED_TEXTS, student=TinySpec(64, 2), teacher=TinySpec(128, 2))
    steps = STEPS[stage.device]
    output_dir = stage.out / "train"
    shutil.rmtree(output_dir, ignore_errors=True)
    config = config_from_dict(
        {
            "steps": steps,
            "output_dir": str(output_dir),
            "checkpoint_every": 0,
            "resume": False,
            "models": {"student": str(models.student), "teacher": str(models.teacher)},
            "backend": {"kind": "hf", "device": stage.device},
            "env": {"name": "alfworld", "targets": ["local"], "max_turns": 3, "families": ["pick_and_place_simple"],
                    "max_tasks": 8},
            "prompt": {"style": "compact", "history_length": 1, "max_prompt_tokens": 256},
            "rollout": {"group_size": 2, "tasks_per_step": 2, "max_new_tokens": 12},
            "objective": {"name": "atod"},
            "optim": {"lr": 1e-3, "gradient_checkpointing": True, "logprob_chunk_tokens": 64},
        }
    )  # fmt: skip
    result = train(config, progress=False)
    records = [json.loads(line) for line in (result.output_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records]
    stage.check("steps logged", logged == list(range(1, steps + 1)), f"steps {logged}, want 1..{steps}")
    losses = [r.get("actor/pg_loss") for r in records]
    stage.check("finite losses", all(v is not None and math.isfinite(v) for v in losses), f"pg_loss {losses}")
    scored = [r.get("teacher/tokens_scored", 0) for r in records]
    stage.check("teacher scored every step", all(s > 0 for s in scored), f"tokens {scored}")
    turns = [r.get("rollout/mean_turns", 0) for r in records]
    stage.check("episodes played over gRPC", all(t > 0 for t in turns), f"mean turns {turns}")
    start, end = load_model(models.student), load_model(result.checkpoint or "")
    changed = sum(
        not torch.equal(a, b) for a, b in zip(start.state_dict().values(), end.state_dict().values(), strict=True)
    )
    stage.check("checkpoint holds updated weights", changed > 0, f"{changed} tensors changed, {result.checkpoint}")
    stage.metrics["step_s"] = [round(r.get("learner/step_s", 0.0), 3) for r in records]
    stage.metrics["success_rate"] = [r.get("rollout/success_rate") for r in records]
    if stage.device == "cuda":
        peak = torch.cuda.max_memory_allocated()
        stage.check("learner and rollouts ran on CUDA", peak > 0, f"peak {peak / 2**20:.0f} MiB allocated")


if __name__ == "__main__":
    raise SystemExit(stage_main("train", run))
