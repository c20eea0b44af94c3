"""A real TRL GRPOTrainer run (2 steps, CPU, tiny Qwen3) on envhub ALFWorld episodes, through both TRL paths."""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from envhub.integrations.trl import EnvhubRollout, EnvhubToolEnv, envhub_reward, task_dataset, tree_rollout

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _config(out: Path, **settings: Any) -> GRPOConfig:
    values: dict[str, Any] = {
        "output_dir": str(out),
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 256,
        "learning_rate": 1e-2,
        "use_cpu": True,
        "report_to": [],
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": 0,
    }
    return GRPOConfig(**{**values, **settings})


def _length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A tiny random policy never wins, so this gives the groups reward variance and the optimizer a real step."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]  # conversational: messages
    return [len(text) / 100 for text in texts]


@pytest.mark.slow
def test_grpo_trainer_runs_two_steps_on_envhub_episodes(alfworld_target: str, tiny: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    before = [p.detach().clone() for p in model.parameters()]
    rollout = EnvhubRollout(alfworld_target, "alfworld", max_turns=3, max_new_tokens=8)
    outputs: list[dict[str, Any]] = []

    def record(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, Any]:
        out = rollout(prompts, trainer)
        assert (
            len(out["completion_ids"]) == len(prompts) and prompts[0] == prompts[1]
        )  # TRL repeats each prompt G times
        outputs.append(copy.deepcopy(out))  # as returned (TRL edits the dict it is given)
        return out

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[envhub_reward, _length_reward],
        args=_config(tmp_path),
        train_dataset=task_dataset(alfworld_target, "alfworld", limit=4),
        processing_class=tokenizer,
        rollout_func=record,
    )
    trainer.train()
    assert trainer.state.global_step == 2 and outputs
    # the environment answered: its feedback tokens are in the completions, masked out of the loss
    assert any(0 in mask and 1 in mask for out in outputs for mask in out["env_mask"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    logged = [entry for entry in trainer.state.log_history if "rewards/envhub_reward/mean" in entry]
    assert len(logged) == 2


@pytest.mark.slow
def test_grpo_trainer_accepts_the_tool_env(alfworld_target: str, tiny: Path, tmp_path: Path) -> None:
    """TRL's environment mode: the trainer probes the class, renders `act` as a tool, resets on the rows."""
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = (resources.files("trl") / "chat_templates" / "qwen3.jinja").read_text()
    dataset = task_dataset(alfworld_target, "alfworld", limit=2)  # as documented: TRL appends the observation
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny),
        args=_config(tmp_path, max_completion_length=16, max_tool_calling_iterations=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=EnvhubToolEnv.factory(alfworld_target, "alfworld"),
    )
    assert [tool.__name__ for tool in trainer.tools] == ["act"]
    trainer.train()
    assert trainer.state.global_step == 2
    assert any("rewards/EnvhubToolEnv/mean" in entry for entry in trainer.state.log_history)


def test_tool_env_plays_an_episode_as_trl_calls_it(alfworld_target: str) -> None:
    env = EnvhubToolEnv.factory(alfworld_target, "alfworld")()
    first = env.reset(task_id="train/00000", prompt="train/00000")
    assert "Task:" in first
    reply = ""
    while "The episode is over." not in reply:
        reply = env.act(env._episodes.expert(env._turn.session_id)[0])  # type: ignore[union-attr]
    assert env.get_reward() == 1.0
    with pytest.raises(ValueError, match="over"):
        env.act("look")


class _VllmGeneration:
    """TRL's `VLLMGeneration.generate` contract (token prompts in; prompt ids, completion ids, top-k logprobs and
    their token ids out; samples to max_completion_length), served by the tiny model on CPU: vLLM is GPU-only."""

    def __init__(self, path: Path, max_completion_length: int) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(path)
        self.max_completion_length = max_completion_length
        self.calls = 0

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int) -> tuple[Any, ...]:
        self.calls += 1
        completions, logprobs = [], []
        for prompt in prompts:
            with torch.no_grad():
                out = self.model.generate(
                    torch.tensor([prompt]),
                    max_new_tokens=self.max_completion_length,
                    do_sample=True,
                    return_dict_in_generate=True,
                    output_scores=True,
                )
                scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
            completions.append(out.sequences[0, len(prompt) :].tolist())
            logprobs.append([[value, -99.0] for value in scores[0].tolist()])  # top-2: the sampled token first
        return prompts, completions, logprobs, [[[0, 0]] * len(c) for c in completions]


def test_the_rollout_generates_through_trls_vllm_when_configured(alfworld_target: str, tiny: Path) -> None:
    from types import SimpleNamespace

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    vllm = _VllmGeneration(tiny, max_completion_length=20)
    trainer = SimpleNamespace(
        processing_class=tokenizer, max_completion_length=512, use_vllm=True, vllm_generation=vllm, temperature=1.0
    )
    rollout = EnvhubRollout(alfworld_target, "alfworld", max_turns=2, max_new_tokens=6)
    prompts = [[{"role": "user", "content": "envhub task train/00001\n"}]] * 2
    out = rollout(prompts, trainer)
    assert vllm.calls == 2  # one batched call per turn, no transformers generate
    for ids, mask, logprobs in zip(out["completion_ids"], out["env_mask"], out["logprobs"], strict=True):
        first_turn = mask.index(0)
        assert 0 < first_turn <= 6 and all(lp <= 0.0 for lp in logprobs[:first_turn])  # cut at max_new_tokens
        assert -99.0 not in logprobs and len(ids) == len(mask) == len(logprobs)


def test_tree_rollout_plays_continuations_from_forks(alfworld_target: str, expert_plan: list[str]) -> None:
    tree = tree_rollout(
        alfworld_target,
        "alfworld",
        "train/00000",
        lambda view: expert_plan[view.step_index],
        lambda branch: [0] if branch.parent is None else [],
        continuations=3,
        max_steps=len(expert_plan),
    )
    assert len(tree.branches) == 4 and tree.forks == 3
    assert all(b.won and b.actions == expert_plan for b in tree.branches)
