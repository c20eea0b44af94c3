"""verl's own agent-loop worker (`AgentLoopWorker.generate_sequences`, verl 0.9.1, in `.venv-verl`) running
`EnvhubAgentLoop` on real envhub ALFWorld episodes: verl composes its config with Hydra, registers the loop
from an agent-loop config file, instantiates it per sample, and pads and stacks what it returns.

verl's LLM servers are vLLM or SGLang engines (GPU only); the `LLMServerClient` here is a tiny random
Qwen3 sampled with transformers on CPU, answering verl's `generate(request_id=, prompt_ids=, sampling_params=)`
with verl's own `TokenOutput`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.workers.rollout.replica import TokenOutput

RESPONSE_LENGTH = 2048
TASKS = ["train/00000", "train/00001"]


class _TinyServer:
    """verl's `LLMServerClient.generate`, sampled from a tiny causal LM on CPU (max 8 new tokens a turn)."""

    def __init__(self, path: Path) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(path)
        self.requests: list[str] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        self.requests.append(request_id)
        torch.manual_seed(len(self.requests))
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=8,
                do_sample=True,
                temperature=max(float(sampling_params["temperature"]), 1e-3),
                top_k=0,
                return_dict_in_generate=True,
                output_scores=True,
            )
            logprobs = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        return TokenOutput(token_ids=out.sequences[0, len(prompt_ids) :].tolist(), log_probs=logprobs[0].tolist())


def _config(tiny: Path, target: str, loops: Path) -> Any:
    import verl

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer/config"), version_base=None):
        return compose(
            "ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={tiny}",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
                f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
                "actor_rollout_ref.rollout.prompt_length=4096",
                "actor_rollout_ref.rollout.calculate_log_probs=true",
                "actor_rollout_ref.rollout.name=vllm",  # the engine verl would start; none is started here
                "data.max_prompt_length=4096",
                f"+envhub.target={target}",
                "+envhub.environment=alfworld",
                "+envhub.max_turns=3",
            ],
        )


def test_verls_agent_loop_worker_runs_envhub_episodes(alfworld_target: str, tiny: Path, tmp_path: Path) -> None:
    loops = tmp_path / "agent_loops.yaml"
    loops.write_text("- name: envhub_agent\n  _target_: envhub.integrations.verl.EnvhubAgentLoop\n")
    server = _TinyServer(tiny)
    worker = AgentLoopWorker(_config(tiny, alfworld_target, loops), llm_client=server)
    batch = DataProto.from_dict(
        non_tensors={
            "agent_name": np.array(["envhub_agent"] * len(TASKS), dtype=object),
            "extra_info": np.array([{"task_id": task} for task in TASKS], dtype=object),
            "raw_prompt": np.array([[{"role": "user", "content": task}] for task in TASKS], dtype=object),
        },
        meta_info={"global_steps": 1},
    )
    out = asyncio.run(worker.generate_sequences(batch))
    assert out.batch["responses"].shape == (len(TASKS), RESPONSE_LENGTH)
    mask = out.batch["response_mask"]
    generated = int(mask.sum())  # 3 turns of at most 8 model tokens each
    assert 0 < generated <= 3 * 8 * len(TASKS)
    response_tokens = int(out.batch["attention_mask"][:, -RESPONSE_LENGTH:].sum())
    assert response_tokens > generated, "the environment's feedback is in the response, masked out"
    assert len(server.requests) == 3 * len(TASKS)
    assert list(out.non_tensor_batch["task_id"]) == TASKS and not any(out.non_tensor_batch["won"])
    assert float(out.batch["rm_scores"].sum()) == 0.0  # reward_score: a random tiny policy does not win in 3 turns
    assert out.batch["rollout_log_probs"].shape == (len(TASKS), RESPONSE_LENGTH)
