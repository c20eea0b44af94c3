"""Expert demonstrations through the servers' GetExpertActions: text for tokenizers, pairs for SFT."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envhub.client import SessionPort
from trainer.prompts import PastStep, PromptRenderer, PromptState, encode_user_turn


@dataclass
class ExpertEpisode:
    """One expert-played episode: the prompt state before each action, and the action."""

    task_id: str
    states: list[PromptState] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    won: bool = False


def play_expert(port: SessionPort, task_id: str, *, seed: int, max_turns: int) -> ExpertEpisode:
    """Follow the expert's next action until the episode ends (or it has no action)."""
    episode = ExpertEpisode(task_id)
    view = port.start(task_id, seed=seed, max_steps=max_turns)
    task = view.task_description
    past: list[PastStep] = []
    try:
        for _ in range(max_turns):
            plan = port.expert(view.session_id)
            if not plan:
                break
            episode.states.append(PromptState(task, view.text, view.admissible or (), list(past)))
            episode.actions.append(plan[0])
            past.append(PastStep(view.text, plan[0]))
            view = port.step(view.session_id, plan[0], timeout=30.0)
            if view.won or view.terminated or view.truncated:
                episode.won = view.won
                break
    finally:
        port.end(view.session_id)
    return episode


def collect_expert(
    port: SessionPort,
    task_ids: Sequence[str],
    *,
    max_turns: int = 30,
    seed: int = 0,
    threads: int = 8,
    on_episode: Callable[[ExpertEpisode], None] | None = None,
) -> list[ExpertEpisode]:
    """Expert episodes of `task_ids` (in that order), played concurrently; `on_episode` hears each as it ends."""

    def play(task_id: str) -> ExpertEpisode:
        episode = play_expert(port, task_id, seed=seed, max_turns=max_turns)
        if on_episode is not None:
            on_episode(episode)
        return episode

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(play, list(task_ids)))


def action_text(action: str, spaced: bool = False) -> str:
    """The response an agent should give for `action` (what SFT targets); Search-QA actions are already tagged.

    `spaced` (`prompt.reply_space`): a space after the opening tag, so that the reply's first word is the same
    tokens as where the prompt shows it after a space (a byte-level BPE tokenizes `Sao` and ` Sao` differently).
    """
    tagged = re.fullmatch(r"<(search|answer)>(.*)</\1>", action, re.DOTALL)
    tag, body = (tagged.group(1), tagged.group(2)) if tagged else ("action", action)
    return f"<{tag}>{' ' if spaced else ''}{body}</{tag}>"


def expert_texts(
    episodes: Sequence[ExpertEpisode], renderers: Sequence[PromptRenderer], spaced: bool = False
) -> list[str]:
    """Every rendered prompt and response of the episodes (tokenizer training corpus; `spaced`: `action_text`'s)."""
    texts = []
    for episode in episodes:
        for state, action in zip(episode.states, episode.actions, strict=True):
            texts += [renderer.render(state) for renderer in renderers]
            texts.append(action_text(action, spaced))
    return texts


def sft_examples(
    episodes: Sequence[ExpertEpisode],
    renderer: PromptRenderer,
    tokenizer: Any,
    max_prompt_tokens: int = 1024,
    spaced: bool = False,
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids + EOS) per expert turn, prompts rendered exactly as rollouts render them (`spaced`:
    `action_text`'s)."""
    examples = []
    for episode in episodes:
        for state, action in zip(episode.states, episode.actions, strict=True):
            prompt = encode_user_turn(tokenizer, renderer.render(state), max_prompt_tokens)
            response = list(tokenizer.encode(action_text(action, spaced), add_special_tokens=False))
            examples.append((prompt, [*response, tokenizer.eos_token_id]))
    return examples
