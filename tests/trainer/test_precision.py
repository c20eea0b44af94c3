"""`precision.cpu_bf16`: the auto decision, and bf16 generation / scoring / learner / SFT within stated tolerances
of the fp32 path (the tolerances docs/trainer-models.md states)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends import HFBackend
from trainer.backends.base import SamplingSettings
from trainer.config import ObjectiveConfig, OptimConfig, TrainerConfig
from trainer.experiments.bench import synthetic_batch
from trainer.learner import Learner
from trainer.models import make_tiny_model, train_tokenizer
from trainer.models.corpus import SEED_TEXTS
from trainer.models.tiny import TinyModels
from trainer.precision import cpu_bf16, cpu_bf16_flags, decide_cpu_bf16, model_dtype
from trainer.sft import sft_train
from trainer.workers.factory import make_generation_backend
from trainer.workers.teacher import TeacherWorker

BF16_LOGP_MEAN = 3e-3
"""Stated tolerance (tiny model; measured 7e-4 for the backend, 5e-4 for the learner): mean |bf16 - fp32| log-prob."""
BF16_LOGP_MAX = 2e-2
"""Stated tolerance (tiny model; measured 3.7e-3): largest |bf16 - fp32| log-prob of a response token."""


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return train_tokenizer(SEED_TEXTS, vocab_size=512)


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    return make_tiny_model(tokenizer, hidden=64, layers=2, seed=0)


def test_auto_follows_the_cpu_flags_and_on_off_override_them() -> None:
    assert decide_cpu_bf16("auto", ("amx_bf16",)) == (True, "precision.cpu_bf16: auto, the CPU has amx_bf16")
    assert decide_cpu_bf16("auto", ())[0] is False
    assert decide_cpu_bf16("on", ())[0] and not decide_cpu_bf16("off", ("avx512_bf16",))[0]
    assert cpu_bf16("on", "cpu") and not cpu_bf16("on", "cuda")
    assert cpu_bf16("auto", "cpu") == bool(cpu_bf16_flags())
    assert model_dtype("on", "cpu") == torch.bfloat16 and model_dtype("off", "cpu") == torch.float32


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert cpu_bf16_flags(str(info)) == ("amx_bf16", "avx512_bf16")
    assert cpu_bf16_flags(str(tmp_path / "missing")) == ()


def _diff(a: list[list[float]], b: list[list[float]]) -> torch.Tensor:
    return (torch.tensor([x for row in a for x in row]) - torch.tensor([x for row in b for x in row])).abs()


def test_bf16_generation_and_scoring_within_the_stated_tolerance(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    ids = dict(eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
    fp32 = HFBackend(model, **ids)  # type: ignore[arg-type]
    bf16 = HFBackend(copy.deepcopy(model).to(torch.bfloat16), **ids)  # type: ignore[arg-type]
    prompts = [tokenizer.encode(text) for text in SEED_TEXTS[:8]]
    gens = bf16.generate(prompts, SamplingSettings(max_new_tokens=16, temperature=1.0, seed=0))
    responses = [g.token_ids for g in gens]
    reference = fp32.score(prompts, responses)
    for got in ([g.logprobs for g in gens], bf16.score(prompts, responses)):
        diff = _diff(got, reference)
        assert 0 < float(diff.mean()) <= BF16_LOGP_MEAN and float(diff.max()) <= BF16_LOGP_MAX


def test_learner_under_cpu_autocast_keeps_fp32_state_and_recomputes_logp_old(tiny_models: TinyModels) -> None:
    from trainer.models.loading import load_model

    batch = synthetic_batch(load_model(tiny_models.student), rows=4, prompt=24, response=8)
    objective = ObjectiveConfig.model_validate({"name": "grpo", "reduction": "token-mean"})
    optim = OptimConfig.model_validate({"lr": 1e-3})
    learner = Learner(load_model(tiny_models.student), objective, optim, recompute_logp_old=True, cpu_bf16=True)
    recomputed, metrics = learner.recompute_old_logprobs(batch)
    diff = metrics["actor/rollout_logp_abs_diff"]  # batch.logp_old is the fp32 forward's
    assert 0 < diff <= BF16_LOGP_MEAN
    learner.step(batch)
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    state = [s for group in learner.optimizer.state.values() for s in group.values() if torch.is_tensor(s)]
    assert state and all(s.dtype == torch.float32 for s in state if s.numel() > 1)
    assert not torch.equal(recomputed.logp_old, batch.logp_old)


def test_bf16_rollout_turns_the_recompute_on() -> None:
    assert OptimConfig().recompute("hf", bf16_rollout=True) and not OptimConfig().recompute("hf")
    assert not OptimConfig(recompute_logp_old=False).recompute("hf", bf16_rollout=True)


def test_sft_under_cpu_autocast_learns_with_fp32_weights(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    examples = [(tokenizer.encode(t[:20]), [*tokenizer.encode(t[20:40]), tokenizer.eos_token_id]) for t in SEED_TEXTS]
    student = copy.deepcopy(model)
    result = sft_train(student, tokenizer, examples, steps=12, lr=3e-3, batch_tokens=512, cpu_bf16=True)
    assert result["last_loss"] < result["first_loss"]
    assert all(p.dtype == torch.float32 for p in student.parameters())


def test_the_config_switch_reaches_the_backend(tiny_models: TinyModels) -> None:
    def build(**sections: object) -> HFBackend:
        config = TrainerConfig.model_validate(
            {
                "models": {"student": str(tiny_models.student), "teacher": None},
                "backend": {"device": "cpu"},
                "objective": {"name": "grpo"},
                **sections,
            }
        )
        backend = make_generation_backend(config, str(tiny_models.student))
        assert isinstance(backend, HFBackend)
        return backend

    on = build(precision={"cpu_bf16": "on"}, prompt={"context": "full"})
    assert next(on.model.parameters()).dtype == torch.bfloat16 and on.kv_store is not None
    off = build(precision={"cpu_bf16": "off"})
    assert next(off.model.parameters()).dtype == torch.float32 and off.kv_store is None
    assert build(prompt={"context": "full"}, backend={"device": "cpu", "kv_cache_mb": 0}).kv_store is None
    assert next(build(precision={"cpu_bf16": True}).model.parameters()).dtype == torch.bfloat16  # YAML's bare `on`
    assert off.decode_attention == "eager"  # `backend.decode_attention`'s default, also on CUDA (gpu-check)
    assert build(backend={"device": "cpu", "decode_attention": "model"}).decode_attention is None
    assert off.width_multiple == 1 and build(backend={"device": "cpu", "score_width_multiple": 64}).width_multiple == 64
    teacher = TrainerConfig.model_validate(
        {
            "models": {"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)},
            "backend": {"device": "cpu", "score_width_multiple": 32},
        }
    )
    assert TeacherWorker(teacher).backend.width_multiple == 32  # type: ignore[union-attr]
