"""PBR drives a planted protocol violation to zero in a short CPU run (paper 002 Figure 5 in miniature).

The tiny student is fine-tuned until about half of its responses open with a stray `</think>`. The
teacher is that same planted model, so the OPD signal at the violation is zero (the paper's case of a
teacher that repeats the student's error); the only thing that can remove it is the PBR term. The
learner then trains on the student's own samples with `stray_close_think` constraints, and the
violation rate of fresh samples is measured every step. Without PBR (weight 0) it stays.
"""

from __future__ import annotations

import random

import pytest
import torch

from trainer.backends.base import SamplingSettings
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups
from trainer.branching.rules import annotate_constraints, make_rules
from trainer.config import ObjectiveConfig, OptimConfig
from trainer.learner import Learner
from trainer.models.loading import load_model, load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.objectives.pbr import PbrConfig
from trainer.prompts import encode_user_turn
from trainer.rollout.types import Trajectory, Turn
from trainer.sft import sft_train

TASKS = ("put a mug in the cabinet", "find the apple", "go to the fridge", "look around", "take the knife")


def _planted(tiny_models: TinyModels) -> tuple[object, object, list[list[int]]]:
    tok = load_tokenizer(tiny_models.student)
    model = load_model(tiny_models.student)
    prompts = [encode_user_turn(tok, f"Your task is to: {task}.") for task in TASKS]
    clean = tok.encode("<think>ok</think><action>look</action>", add_special_tokens=False)
    stray = tok.encode("</think><action>look</action>", add_special_tokens=False)
    examples = [(p, [*r, tok.eos_token_id]) for p in prompts for r in (clean, stray)]
    sft_train(model, tok, examples, steps=60, lr=3e-3, seed=0)
    model.zero_grad(set_to_none=True)  # SFT leaves its last gradients behind; the learner must start clean
    return tok, model, prompts


def _violation_rate(backend: HFBackend, prompts: list[list[int]], think_end: int, seed: int) -> tuple[float, list]:
    generations = backend.generate(prompts * 8, SamplingSettings(max_new_tokens=6, temperature=1.0, seed=seed))
    rate = sum(g.token_ids[:1] == [think_end] for g in generations) / len(generations)
    return rate, generations


def _run(tiny_models: TinyModels, weight: float, steps: int) -> list[float]:
    torch.manual_seed(0)
    tok, model, prompts = _planted(tiny_models)
    think_end = tok.encode("</think>", add_special_tokens=False)[0]
    backend = HFBackend(model, eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    learner = Learner(
        model, ObjectiveConfig(name="opd"), OptimConfig(lr=3e-3, grad_clip=1.0), pbr=PbrConfig(weight=weight)
    )
    rules = make_rules(["stray_close_think"], tok)
    rates = []
    for step in range(steps):
        rate, generations = _violation_rate(backend, prompts, think_end, seed=step)
        rates.append(rate)
        trajectories = []
        for i, (prompt, gen) in enumerate(zip(prompts * 8, generations, strict=True)):
            turn = Turn(prompt, gen.token_ids, gen.logprobs, "", None, "", logp_teacher=list(gen.logprobs))
            trajectories.append(Trajectory(f"t{i}", i, 0, turns=[turn]))
        annotate_constraints(trajectories, rules)
        learner.step(SyncGroups("history", pad_id=tok.pad_token_id).compose(trajectories))
        model.eval()
    rates.append(_violation_rate(backend, prompts * 2, think_end, seed=10_000)[0])
    return rates


@pytest.mark.slow
def test_pbr_drives_a_planted_stray_tag_to_zero(tiny_models: TinyModels) -> None:
    random.seed(0)
    repaired = _run(tiny_models, weight=0.01, steps=5)
    untouched = _run(tiny_models, weight=0.0, steps=5)
    print(f"violation rate per step with PBR: {repaired}\nwithout PBR: {untouched}")
    assert repaired[0] > 0.2  # the plant took
    assert repaired[-1] == 0.0 and repaired[-2] == 0.0  # gone, on 80 fresh samples at the end
    assert min(untouched[-3:]) > 0.1  # the teacher (the planted model itself) does not remove it
