"""`play_episode`: one multi-turn envhub episode against an async token-in/token-out generator.

This is the host-independent body of agent-loop style integrations (verl's `AgentLoopBase`):
the host supplies `generate` (its LLM server call) and its tokenizer as a `ChatTokens` (the chat
template, as verl tokenises conversations; raw text for a tokenizer without one); the loop renders
the observation as a user turn, samples a turn, steps the episode through a shared `StepBatcher`
(so concurrent episodes share envhub rounds), appends the environment's answer as the next user
turn in untrained tokens, and returns the token fields the host trains on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envhub.client.chat import ChatTokens
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
    chat: ChatTokens,
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
    tokens = EpisodeTokens(prompt_ids=chat.prompt(render(turn)))
    request_id = uuid.uuid4().hex
    try:
        while tokens.num_turns < max_turns and len(tokens.response_ids) < response_length:
            out = await generate(
                request_id=request_id,
                prompt_ids=tokens.prompt_ids + tokens.response_ids,
                sampling_params=sampling_params,
            )
            reply = list(out.token_ids)
            tokens.add(reply, out.log_probs, trained=True)
            tokens.num_turns += 1
            text = chat.tokenizer.decode(reply, skip_special_tokens=True)
            turn = await batcher.step(turn.session_id, parse_action(text))
            tokens.reward += turn.reward
            if turn.done:
                break
            tokens.add(chat.feedback(render(turn), closed=chat.closes(reply)), None, trained=False)
    finally:
        await asyncio.to_thread(episodes.end, turn.session_id)
    tokens.won = turn.won
    return tokens
