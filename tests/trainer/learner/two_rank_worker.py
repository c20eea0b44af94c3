"""One rank of the 2-rank learner check (run as a script by test_learner_dist.py, one process per rank).

argv: rank world_size init_file model_dir out_file. Builds the shared batch, runs one backward
pass through `Learner` (FSDP2 when world_size > 1) and saves rank 0's metrics and full gradients.
"""

from __future__ import annotations

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
    if int(world_size) > 1:
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=int(rank), world_size=int(world_size)
        )
    from trainer.learner import batch_loss_weights

    batch, learner = batch_and_learner(model_dir)
    advantages, _ = learner.spec.compute(batch, learner.hyperparameters, step=0)  # type: ignore[attr-defined]
    weights = batch_loss_weights(batch, learner.reduction)  # type: ignore[attr-defined]
    metrics = learner._accumulate(batch, advantages, weights)  # type: ignore[attr-defined]
    grads = {}
    for name, param in learner.model.named_parameters():  # type: ignore[attr-defined]
        grad = param.grad
        grads[name] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    weights = learner.weights()  # type: ignore[attr-defined]  # a collective: every rank calls it
    if int(rank) == 0:
        torch.save({"metrics": metrics, "grads": grads, "weights": weights}, out_file)
    if int(world_size) > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
