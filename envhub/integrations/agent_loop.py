"""`play_episode`: one multi-turn envhub episode against an async token-in/token-out generator.

This is the host-independent body of agent-loop style integrations (verl's `AgentLoopBase`):
the host supplies `generate` (its LLM server call) and a tokenizer; the loop renders the
observation, samples a turn, steps the episode through a shared `StepBatcher` (so concurrent
episodes share envhub rounds), appends the environment's answer as untrained tokens, and
returns the token fields the host trains on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envhub.integrations.batching import StepBatcher
from envhub.integrations.text import Render, parse_action, render_turn


class Generated(Protocol):
    """What the host's generator returns (verl's `TokenOutput` has these fields)."""

    token_ids: list[int]
    log_probs: list[float] | None


Generate = Callable[..., Awaitable[Generated]]
"""`await generate(request_id=..., prompt_ids=..., sampling_params=...)`, as verl's `server_manager.generate`."""


@dataclass
class EpisodeTokens:
    """A played episode as training data: `response_mask` is 1 on model tokens, 0 on environment tokens."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    num_turns: int = 0

    def add(self, ids: list[int], logprobs: list[float] | None, trained: bool) -> None:
        self.response_ids += ids
        self.response_mask += [int(trained)] * len(ids)
        self.response_logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


async def play_episode(
    generate: Generate,
    tokenizer: Any,
    batcher: StepBatcher,
    task_id: str,
    *,
    sampling_params: dict[str, Any],
    seed: int = 0,
    max_turns: int = 8,
    response_length: int = 1024,
    render: Render = render_turn,
) -> EpisodeTokens:
    """Play `task_id` until it ends, `max_turns` model turns pass, or the response reaches `response_length`."""
    episodes = batcher.episodes
    turn = await asyncio.to_thread(episodes.start, task_id, seed=seed)
    tokens = EpisodeTokens(prompt_ids=tokenizer.encode(render(turn), add_special_tokens=False))
    request_id = uuid.uuid4().hex
    try:
        while tokens.num_turns < max_turns and len(tokens.response_ids) < response_length:
            out = await generate(
                request_id=request_id,
                prompt_ids=tokens.prompt_ids + tokens.response_ids,
                sampling_params=sampling_params,
            )
            tokens.add(list(out.token_ids), out.log_probs, trained=True)
            tokens.num_turns += 1
            turn = await batcher.step(turn.session_id, parse_action(tokenizer.decode(out.token_ids)))
            tokens.reward += turn.reward
            if turn.done:
                break
            tokens.add(tokenizer.encode(render(turn), add_special_tokens=False), None, trained=False)
    finally:
        await asyncio.to_thread(episodes.end, turn.session_id)
    tokens.won = turn.won
    return tokens
