"""VLLMBackend on a CUDA GPU (the [gpu] extra): log-probs against the HF backend, scoring, weight sync."""

from __future__ import annotations

import importlib.util
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend, make_backend
from trainer.backends.base import SamplingSettings
from trainer.models import make_tiny_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None or not torch.cuda.is_available(),
        reason="needs a CUDA GPU and the [gpu] extra (vllm)",
    ),
]


@pytest.fixture(scope="module")
def folder(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    path = tmp_path_factory.mktemp("tiny-vllm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vllm_backend(folder: Path):  # type: ignore[no-untyped-def]
    return make_backend("vllm", folder, dtype="float32", gpu_memory_utilization=0.2, enforce_eager=True)


def test_vllm_logprobs_match_hf_scoring(vllm_backend, backend: HFBackend, prompts: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    gens = vllm_backend.generate(prompts, SamplingSettings(max_new_tokens=12, temperature=1.0, top_logprobs=5, seed=0))
    hf_scores = backend.score(prompts, [g.token_ids for g in gens])
    for gen, expected in zip(gens, hf_scores, strict=True):
        torch.testing.assert_close(torch.tensor(gen.logprobs), torch.tensor(expected), atol=2e-3, rtol=0)
        assert gen.top_logprobs is not None and all(len(top) == 5 for top in gen.top_logprobs)
    again = vllm_backend.generate(prompts, SamplingSettings(max_new_tokens=12, temperature=1.0, seed=0))
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]


def test_vllm_score_matches_hf(vllm_backend, backend: HFBackend, prompts: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    responses = [[5, 6, 7], [100, 200], [42] * 9, [7]]
    for got, want in zip(vllm_backend.score(prompts, responses), backend.score(prompts, responses), strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=2e-3, rtol=0)


def test_vllm_update_weights(vllm_backend, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]]) -> None:  # type: ignore[no-untyped-def]
    other = make_tiny_model(tokenizer, seed=11)
    reference = HFBackend(other, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    responses = [[5, 6, 7]] * len(prompts)
    vllm_backend.update_weights(other.state_dict())
    for got, want in zip(vllm_backend.score(prompts, responses), reference.score(prompts, responses), strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=2e-3, rtol=0)


_LEARNER = """
import pickle, sys, time
from pathlib import Path
from trainer.backends.weight_transfer import ENGINE_DTYPE, WeightExport
from trainer.models.loading import load_model

folder, out, done = sys.argv[1:4]
export = WeightExport(load_model(folder, device="cuda").state_dict(), ENGINE_DTYPE, 64 * 1024)
Path(out + ".tmp").write_bytes(pickle.dumps([export.ipc_info(c) for c in range(len(export.chunks))]))
Path(out + ".tmp").rename(out)
while not Path(done).exists():  # the tensors must outlive the engine's finish_weight_update
    time.sleep(0.1)
export.release()
"""

_ENGINE = """
import json, pickle, sys
from pathlib import Path
from trainer.backends import make_backend

folder, infos, prompts, out = sys.argv[1:5]
engine = make_backend(
    "vllm", folder, gpu_memory_utilization=0.2, enforce_eager=True, weight_transfer="ipc", sleep_mode=True
)
engine.init_weight_transfer({"packed": False})
engine.sleep(2)
engine.wake_up(["weights"])
engine.start_weight_update()
for info in pickle.loads(Path(infos).read_bytes()):  # the sibling learner's file, not the wire
    engine.receive_weights(info)
engine.finish_weight_update()
engine.wake_up(["kv_cache"])
rows = json.loads(prompts)
Path(out).write_text(json.dumps(engine.score(rows, [[5, 6, 7]] * len(rows))))
"""


def _wait_for(path: Path, learner: subprocess.Popen[bytes]) -> bytes:
    while not path.exists():
        assert learner.poll() is None, "the learner process died"
        time.sleep(0.1)
    return path.read_bytes()


def test_vllm_sleeps_then_loads_weights_over_ipc(  # type: ignore[no-untyped-def]
    folder: Path, tokenizer: PreTrainedTokenizerBase, prompts: list[list[int]], tmp_path: Path
) -> None:
    """Colocated order (sleep 2, wake weights, ipc update in chunks, wake kv cache) on one GPU, weights
    exported by another process (a learner); then vLLM (bf16) scores like the new weights. The engine runs
    in a child process of its own: this one already holds the module's engine, and vLLM runs one per process."""
    other = make_tiny_model(tokenizer, seed=11)
    other.save_pretrained(tmp_path / "other")
    infos, done, scores = tmp_path / "infos.pkl", tmp_path / "done", tmp_path / "scores.json"
    learner = subprocess.Popen([sys.executable, "-c", _LEARNER, str(tmp_path / "other"), str(infos), str(done)])
    try:
        assert len(pickle.loads(_wait_for(infos, learner))) > 1  # our own child's file, not the wire
        engine = [sys.executable, "-c", _ENGINE, str(folder), str(infos), json.dumps(prompts), str(scores)]
        subprocess.run(engine, check=True, timeout=600)
    finally:
        done.touch()
        learner.wait(timeout=60)
    reference = HFBackend(other, eos_token_ids=[], pad_token_id=tokenizer.pad_token_id)
    responses = [[5, 6, 7]] * len(prompts)
    for got, want in zip(json.loads(scores.read_text()), reference.score(prompts, responses), strict=True):
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=5e-2, rtol=0)
