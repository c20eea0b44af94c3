"""The learner's chunked log-probs and its FSDP2 path: 2 ranks on CPU (gloo) equal 1 rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.learner import token_logprobs
from trainer.learner_dist import LogprobModel, rank_rows
from trainer.models.loading import load_model
from trainer.models.tiny import TinyModels

WORKER = Path(__file__).with_name("two_rank_worker.py")


def test_chunked_logprobs_equal_the_unchunked_ones(tiny_models: TinyModels) -> None:
    model = load_model(tiny_models.student)
    ids = torch.randint(5, 500, (3, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[2, 8:] = False
    reference, log_softmax = token_logprobs(model, ids, mask)
    for chunk in (0, 1, 7, 1000):
        logp, entropy = LogprobModel(model, chunk)(ids, mask)
        assert torch.allclose(logp, reference, atol=1e-5)
        assert torch.allclose(entropy[:, 1:], -(log_softmax.exp() * log_softmax).sum(-1), atol=1e-4)
    # Gradients flow through the checkpointed chunks as through the plain computation.
    LogprobModel(model, 4)(ids, mask)[0].sum().backward()
    chunked = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    token_logprobs(model, ids, mask)[0].sum().backward()
    for got, want in zip(chunked, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(got, want, atol=1e-5)


def test_rank_rows_cover_every_row_once() -> None:
    parts = [rank_rows(5, r, 2) for r in range(2)]
    assert parts == [slice(0, 3), slice(3, 5)]
    assert [rank_rows(1, r, 3) for r in range(3)] == [slice(0, 1), slice(1, 1), slice(1, 1)]


def _run(world_size: int, model_dir: str, tmp: Path) -> dict:
    out, init = tmp / f"out{world_size}.pt", tmp / f"init{world_size}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(r), str(world_size), str(init), model_dir, str(out)], env=env
        )
        for r in range(world_size)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0] * world_size
    result: dict = torch.load(out, weights_only=False)
    return result


@pytest.mark.slow
def test_two_rank_fsdp2_learner_matches_one_rank(tiny_models: TinyModels, tmp_path: Path) -> None:
    one = _run(1, str(tiny_models.student), tmp_path)
    two = _run(2, str(tiny_models.student), tmp_path)
    assert one["metrics"].keys() == two["metrics"].keys()
    for name, value in one["metrics"].items():
        assert two["metrics"][name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert one["grads"].keys() == two["grads"].keys()
    assert any(float(g.abs().max()) > 0 for g in one["grads"].values())
    for name, grad in one["grads"].items():
        assert torch.allclose(two["grads"][name], grad, atol=1e-6, rtol=1e-4), name
    assert one["weights"].keys() == two["weights"].keys()
    for name, tensor in one["weights"].items():
        assert torch.equal(two["weights"][name], tensor), name
