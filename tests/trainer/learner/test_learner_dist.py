"""The learner's chunked log-probs and its FSDP2 path: 2 ranks on CPU (gloo) equal 1 rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.learner import STATE_FILE, token_logprobs
from trainer.learner_dist import LogprobModel, rank_rows
from trainer.models.loading import SHARDED_DIR, load_model
from trainer.models.tiny import TinyModels

WORKER = Path(__file__).with_name("two_rank_worker.py")


def test_chunked_logprobs_equal_the_unchunked_ones(tiny_models: TinyModels) -> None:
    model = load_model(tiny_models.student)
    ids = torch.randint(5, 500, (3, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[2, 8:] = False
    reference, log_softmax = token_logprobs(model, ids, mask)
    for chunk in (0, 1, 7, 1000):
        logp, entropy, _ = LogprobModel(model, chunk)(ids, mask)
        assert torch.allclose(logp, reference, atol=1e-5)
        assert torch.allclose(entropy[:, 1:], -(log_softmax.exp() * log_softmax).sum(-1), atol=1e-4)
    # Gradients flow through the checkpointed chunks as through the plain computation.
    LogprobModel(model, 4)(ids, mask)[0].sum().backward()
    chunked = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    token_logprobs(model, ids, mask)[0].sum().backward()
    for got, want in zip(chunked, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(got, want, atol=1e-5)


def test_projection_at_chosen_positions_equals_the_full_one(tiny_models: TinyModels) -> None:
    """fp32 parity (1e-5) of the supervised-positions path with the full projection, values and gradients;
    unchosen positions get 0 (docs/design/029)."""
    model = load_model(tiny_models.student)
    ids = torch.randint(5, 500, (3, 11), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[2, 8:] = False
    chosen = torch.zeros_like(mask)
    chosen[:, 6:] = True
    chosen[2, 8:] = False
    reference, ref_entropy, _ = LogprobModel(model, 4)(ids, mask)
    for chunk in (0, 3):
        logp, entropy, _ = LogprobModel(model, chunk)(ids, mask, chosen)
        torch.testing.assert_close(logp[chosen], reference[chosen], atol=1e-5, rtol=0)
        torch.testing.assert_close(entropy[chosen], ref_entropy[chosen], atol=1e-5, rtol=0)
        assert not logp[~chosen].any() and not entropy[~chosen].any()
    (reference * chosen).sum().backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    LogprobModel(model, 3)(ids, mask, chosen)[0].sum().backward()
    for got, want in zip((p.grad for p in model.parameters()), full, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_rank_rows_cover_every_row_once() -> None:
    parts = [rank_rows(5, r, 2) for r in range(2)]
    assert parts == [slice(0, 3), slice(3, 5)]
    assert [rank_rows(1, r, 3) for r in range(3)] == [slice(0, 1), slice(1, 1), slice(1, 1)]


def _run(world_size: int, model_dir: str, tmp: Path, *scenario: str) -> dict:
    name = "-".join([str(world_size), *scenario[:1]])
    out, init = tmp / f"out{name}.pt", tmp / f"init{name}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [str(WORKER), "", str(world_size), str(init), model_dir, str(out), *scenario]
    procs = [subprocess.Popen([sys.executable, *argv[:1], str(r), *argv[2:]], env=env) for r in range(world_size)]
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


@pytest.mark.slow
def test_two_rank_sharded_checkpoint_resumes_to_the_uninterrupted_run(tiny_models: TinyModels, tmp_path: Path) -> None:
    """Save after one update (each rank its own DCP shards, nothing gathered), resume in fresh processes,
    update once more: same loss, metrics and weights as two updates without interruption."""
    student = str(tiny_models.student)
    straight = _run(2, student, tmp_path, "steps")
    checkpoint = tmp_path / "ckpt"
    saved = _run(2, student, tmp_path, "save", str(checkpoint))
    shards = sorted(p.name for p in (checkpoint / SHARDED_DIR).glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
    assert not list(checkpoint.glob("*.safetensors")) and (checkpoint / STATE_FILE).is_file()
    resumed = _run(2, student, tmp_path, "resume", str(checkpoint))
    assert resumed["step"] == straight["step"] == 2
    for name, value in straight["metrics"].items():
        if name != "learner/step_s":
            assert resumed["metrics"][name] == pytest.approx(value, rel=1e-6, abs=1e-9), name
    # one process assembles the shards into the whole model (what `trainer eval --policy` loads)
    assembled = load_model(checkpoint).state_dict()
    assert assembled.keys() == saved["weights"].keys()
    for name, tensor in saved["weights"].items():
        assert torch.equal(assembled[name], tensor), name
    moved = [n for n, t in straight["weights"].items() if not torch.equal(t, saved["weights"][n])]
    assert moved  # the second update changed the weights, so equality below is not trivial
    for name, tensor in straight["weights"].items():
        assert torch.equal(resumed["weights"][name], tensor), name
