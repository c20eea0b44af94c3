"""One rank of the multi-rank learner checks (run as a script by test_learner_dist.py, one process per rank).

argv: rank world_size init_file model_dir out_file [scenario [checkpoint]]. Builds the shared batch and
the `Learner` (FSDP2 when world_size > 1), then, by scenario:
* `grads` (default): one backward pass; rank 0 saves the metrics, full gradients and weights;
* `steps`: two updates; rank 0 saves the second update's metrics and the weights after it;
* `save`: one update, then `save(checkpoint)`;
* `resume`: `load(checkpoint)`, one update; rank 0 saves its metrics and the weights after it.
"""

from __future__ import annotations

import os
import sys

import torch


def batch_and_learner(model_dir: str) -> tuple[object, object]:
    """The same batch (5 rows of uneven length, one GRPO group) and learner on every rank."""
    from trainer.batching import SyncGroups
    from trainer.config import ObjectiveConfig, OptimConfig
    from trainer.learner import Learner
    from trainer.models.loading import load_model
    from trainer.rollout.types import Trajectory, Turn

    gen = torch.Generator().manual_seed(7)
    trajectories = []
    for i in range(5):
        prompt = torch.randint(5, 500, (6 + 3 * i,), generator=gen).tolist()
        response = torch.randint(5, 500, (4 + 2 * i,), generator=gen).tolist()
        turn = Turn(prompt, response, [-2.0 - 0.1 * k for k in range(len(response))], "", "look", "ok")
        trajectories.append(Trajectory("t", group=0, seed=0, turns=[turn], won=i % 2 == 0))
    batch = SyncGroups(pad_id=0).compose(trajectories)
    torch.manual_seed(0)
    optim = OptimConfig(lr=1e-3, micro_batch_tokens=40, logprob_chunk_tokens=7)
    return batch, Learner(load_model(model_dir), ObjectiveConfig(name="grpo"), optim)


def main() -> None:
    rank, world_size, init_file, model_dir, out_file = sys.argv[1:6]
    scenario = sys.argv[6] if len(sys.argv) > 6 else "grads"
    if int(world_size) > 1:
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=int(rank), world_size=int(world_size)
        )
    batch, learner = batch_and_learner(model_dir)
    result = grads(batch, learner) if scenario == "grads" else updates(batch, learner, scenario, sys.argv[7:])
    result["weights"] = learner.weights()  # type: ignore[attr-defined]  # a collective: every rank calls it
    if int(rank) == 0:
        torch.save(result, out_file)
    if int(world_size) > 1:
        torch.distributed.barrier()  # both ranks leave together: a rank tearing gloo down while its peer still
        torch.distributed.destroy_process_group()  # wrote its result aborted at exit (std::terminate, -6)
    # Gloo's worker threads can still hold tensors when the interpreter finalizes, whose release then aborts
    # (std::terminate, -6; 2 runs in 20 here). Everything is written: leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def grads(batch: object, learner: object) -> dict[str, object]:
    """Metrics and full gradients of one backward pass."""
    from trainer.learner import batch_loss_weights

    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=0)  # type: ignore[attr-defined]
    weights = batch_loss_weights(batch, learner.reduction)  # type: ignore[arg-type, attr-defined]
    metrics = learner._accumulate(batch, advantages, weights)  # type: ignore[attr-defined]
    full = {}
    for name, param in learner.model.named_parameters():  # type: ignore[attr-defined]
        grad = param.grad
        full[name] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    return {"metrics": metrics, "grads": full}


def updates(batch: object, learner: object, scenario: str, checkpoint: list[str]) -> dict[str, object]:
    """The `steps`, `save` and `resume` scenarios: the metrics of the last update."""
    if scenario == "resume":
        learner.load(checkpoint[0])  # type: ignore[attr-defined]
    metrics = learner.step(batch)  # type: ignore[attr-defined]
    if scenario == "steps":
        metrics = learner.step(batch)  # type: ignore[attr-defined]
    if scenario == "save":
        learner.save(checkpoint[0])  # type: ignore[attr-defined]
    return {"metrics": metrics, "step": learner.global_step}  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
