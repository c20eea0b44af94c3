"""The verl agent loop's body (`play_episode`) on real envhub ALFWorld episodes, with verl's generate surface
served by a real tiny torch model and by a scripted expert. verl itself (transformers<5.11) is not installed here."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from envhub.client import Sessions
from envhub.client.chat import ChatTokens
from envhub.integrations.agent_loop import play_episode
from envhub.integrations.batching import StepBatcher


class _TinyServer:
    """`server_manager.generate` as verl calls it, sampled from a tiny causal LM on CPU."""

    def __init__(self, path: Path) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(path)
        self.calls = 0

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        self.calls += 1
        torch.manual_seed(self.calls)
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=sampling_params["max_tokens"],
                do_sample=True,
                return_dict_in_generate=True,
                output_scores=True,
            )
            logprobs = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        new = out.sequences[0, len(prompt_ids) :].tolist()
        return SimpleNamespace(token_ids=new, log_probs=logprobs[0].tolist())


class _Expert:
    """A generator that answers with the environment expert's plan, one action per call."""

    def __init__(self, tokenizer: Any, plan: list[str]) -> None:
        self.tokenizer, self.plan = tokenizer, iter(plan)

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        ids = self.tokenizer.encode(f"<action>{next(self.plan)}</action>", add_special_tokens=False)
        return SimpleNamespace(token_ids=ids, log_probs=None)


def test_concurrent_agent_loops_play_envhub_episodes(alfworld_target: str, tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    episodes = Sessions.connect(alfworld_target, "alfworld")
    first = episodes.start("train/00000")
    plan, turn = [], first
    while not turn.done:
        plan.append(episodes.expert(turn.session_id)[0])
        turn = episodes.step(turn.session_id, plan[-1])
    episodes.end(turn.session_id)
    batcher = StepBatcher(episodes)
    server = _TinyServer(tiny)
    params = {"max_tokens": 8, "temperature": 1.0}

    async def play() -> list[Any]:
        return await asyncio.gather(
            play_episode(
                _Expert(tokenizer, plan).generate,
                ChatTokens(tokenizer),
                batcher,
                "train/00000",
                sampling_params=params,
                response_length=1 << 16,  # the rendered admissible actions are long in a 400-token vocabulary
            ),
            *(
                play_episode(server.generate, ChatTokens(tokenizer), batcher, task, sampling_params=params, max_turns=3)
                for task in ("train/00001", "train/00002", "train/00001")
            ),
        )

    expert, *sampled = asyncio.run(play())
    episodes.close()
    assert expert.won and expert.reward == 1.0 and expert.num_turns == len(plan)
    for tokens in sampled:
        assert len(tokens.response_ids) == len(tokens.response_mask) == len(tokens.response_logprobs)
        assert tokens.num_turns == 3 and 0 in tokens.response_mask and 1 in tokens.response_mask
        assert tokens.prompt_ids and not tokens.won
    assert batcher.rounds <= expert.num_turns + sum(t.num_turns for t in sampled)
