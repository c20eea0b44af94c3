"""TRL over envhub: GRPOTrainer's two multi-turn paths, backed by envhub sessions.

* `EnvhubRollout`: a `rollout_func` for `GRPOTrainer`. It plays every episode of the batch
  turn by turn: one batched `generate` for all live episodes, then one batched envhub step
  for all of them (`step_many`, one StepBatch call per replica). The G episodes
  of one prompt start from one session forked G-1 times, so a group shares its exact start.
  Returns TRL's token fields with `env_mask` (environment text is not trained on) and the
  episodes' returns as `env_reward`, which `envhub_reward` hands to the trainer.
* `EnvhubToolEnv`: an `environment_factory` class (TRL's tool-calling environment mode): the
  model calls `act(command)`; `get_reward()` scores the episode.
* `tree_rollout`: a tree of continuations of one task from forks of its live sessions
  (`envhub.client.tree.play_tree`), for step-level credit (docs/tree-rollouts.md).

Both take the task from the dataset: `task_dataset(...)` writes one row per task, whose
`prompt` is one conversational user message naming the task (`envhub task <id>`: TRL's
environment mode appends the first observation to it; the rollout reads the id from it and
renders its own prompt from the first observation) and whose `task_id` column
`EnvhubToolEnv.reset` receives. The rollout tokenises through the tokenizer's chat template
(`ChatTokens`; raw text for a tokenizer without one). Install `envhub[trl]`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from itertools import groupby
from typing import Any

import torch
from datasets import Dataset

from envhub.client import EnvView, SessionPort, Sessions
from envhub.client.chat import ChatTokens
from envhub.client.tree import ForkRule, Policy, Tree, play_tree
from envhub.integrations.text import Render, parse_action, render_turn

TASK_LINE = "envhub task {task_id}\n"
"""The user message of a dataset row (TRL's environment mode appends the first observation to it)."""
_TASK = re.compile(r"envhub task (\S+)")
Sampled = list[tuple[list[int], list[float]]]
"""One sampled turn per context: its token ids and their sampling log-probabilities."""


def task_dataset(targets: str | Sequence[str], environment: str, split: str = "train", limit: int = 0) -> Dataset:
    """One row per task of `split` (the first `limit` when > 0): `prompt` is a conversation of one user message
    naming the task (TASK_LINE), `task_id` the task id."""
    episodes = Sessions.connect(targets, environment)
    try:
        ids = episodes.task_ids(split)
    finally:
        episodes.close()
    ids = ids[:limit] if limit > 0 else ids
    prompts = [[{"role": "user", "content": TASK_LINE.format(task_id=task_id)}] for task_id in ids]
    return Dataset.from_dict({"prompt": prompts, "task_id": ids})


def task_of(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """The envhub task id a dataset prompt names: a `task_dataset` conversation, or a plain task id."""
    if isinstance(prompt, str):
        return prompt
    found = _TASK.match(str(prompt[-1]["content"]))
    if found is None:
        raise ValueError(f"the prompt names no envhub task (a user message 'envhub task <id>'): {prompt!r}")
    return found.group(1)


def envhub_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The reward function for `EnvhubRollout`: each episode's summed environment reward."""
    return [float(r) for r in env_reward]


class _Episode:
    """One rollout being played: its session, tokens, mask and return."""

    def __init__(self, turn: EnvView, prompt_ids: list[int]) -> None:
        self.turn = turn
        self.prompt_ids = prompt_ids
        self.completion_ids: list[int] = []
        self.env_mask: list[int] = []
        self.logprobs: list[float] = []
        self.reward = 0.0
        self.live = True

    def add(self, ids: list[int], logprobs: list[float] | None) -> None:
        self.completion_ids += ids
        self.env_mask += [1 if logprobs is not None else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


class EnvhubRollout:
    """A GRPOTrainer `rollout_func` playing envhub episodes, `max_turns` model turns at most.

    `seed` is the environment seed of every group (the same start for its G episodes).
    A model turn is at most `max_new_tokens` tokens; an episode also stops when its
    completion reaches the trainer's `max_completion_length`.
    """

    def __init__(
        self,
        targets: str | Sequence[str],
        environment: str,
        *,
        max_turns: int = 4,
        max_new_tokens: int = 24,
        max_steps: int = 0,
        seed: int = 0,
        render: Render = render_turn,
        token: str | None = None,
    ) -> None:
        self.episodes = Sessions.connect(targets, environment, token=token, max_steps=max_steps)
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.render = render

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tokenizer = trainer.processing_class
        chat = ChatTokens(tokenizer)
        budget = int(trainer.max_completion_length)
        games = self._start(prompts, chat)
        try:
            for _ in range(self.max_turns):
                live = [g for g in games if g.live]
                if not live:
                    break
                texts = self._generate(live, trainer, tokenizer)
                actions = [(g.turn.session_id, parse_action(t)) for g, t in zip(live, texts, strict=True)]
                turns = self.episodes.step_many(actions)
                for game, turn in zip(live, turns, strict=True):
                    game.turn, game.reward = turn, game.reward + turn.reward
                    if turn.done or len(game.completion_ids) >= budget:
                        game.live = False
                    else:
                        closed = chat.closes(game.completion_ids)
                        game.add(chat.feedback(self.render(turn), closed), None)
        finally:
            for game in games:
                self.episodes.end(game.turn.session_id)
        return {
            "prompt_ids": [g.prompt_ids for g in games],
            "completion_ids": [g.completion_ids[:budget] for g in games],
            "logprobs": [g.logprobs[:budget] for g in games],
            "env_mask": [g.env_mask[:budget] for g in games],
            "env_reward": [g.reward for g in games],
            "won": [g.turn.won for g in games],
        }

    def _start(self, prompts: list[Any], chat: ChatTokens) -> list[_Episode]:
        """One session per run of equal prompts (TRL repeats each prompt G times), forked for the others."""
        games = []
        for task_id, run in groupby(task_of(p) for p in prompts):
            views = self.episodes.start_group(task_id, size=len(list(run)), seed=self.seed)
            ids = chat.prompt(self.render(views[0]))
            games += [_Episode(view, list(ids)) for view in views]
        return games

    def _generate(self, live: list[_Episode], trainer: Any, tokenizer: Any) -> list[str]:
        """One sampled model turn for every live episode, in one batch; appends tokens and logprobs.

        With TRL's vLLM configured (`use_vllm`), through TRL's own vLLM generation (whose weights TRL syncs
        before calling the rollout), else with the trainer's model through `transformers`."""
        contexts = [g.prompt_ids + g.completion_ids for g in live]
        sample = self._sample_vllm if getattr(trainer, "use_vllm", False) else self._sample_hf
        turns = sample(contexts, trainer, tokenizer)
        texts = []
        for game, (ids, logprobs) in zip(live, turns, strict=True):
            game.add(ids, logprobs)
            texts.append(tokenizer.decode(ids, skip_special_tokens=True))
        return texts

    def _sample_vllm(self, contexts: list[list[int]], trainer: Any, tokenizer: Any) -> Sampled:
        """TRL's `vllm_generation.generate` on the token contexts: it samples up to the trainer's
        max_completion_length and stops at EOS; a turn keeps its first `max_new_tokens` tokens."""
        _, completions, logprobs, _ = trainer.vllm_generation.generate(prompts=contexts, images=None, num_generations=1)
        return [
            (list(ids)[: self.max_new_tokens], [float(top[0]) for top in lps][: self.max_new_tokens])
            for ids, lps in zip(completions, logprobs, strict=True)
        ]

    def _sample_hf(
        self, contexts: list[list[int]], trainer: Any, tokenizer: Any
    ) -> list[tuple[list[int], list[float]]]:
        """`generate` of the trainer's model on one left-padded batch, cut at each row's EOS."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        width = max(len(c) for c in contexts)
        pad = tokenizer.pad_token_id
        device = next(model.parameters()).device
        input_ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
        attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=self.max_new_tokens,
                do_sample=True,
                temperature=trainer.temperature,
                top_k=0,
                pad_token_id=pad,
                return_dict_in_generate=True,
                output_scores=True,
            )
            scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        turns = []
        for row in range(len(contexts)):
            new = out.sequences[row, width:].tolist()
            length = next((i + 1 for i, t in enumerate(new) if t == tokenizer.eos_token_id), len(new))
            while length > 0 and new[length - 1] == pad and pad != tokenizer.eos_token_id:
                length -= 1
            turns.append((new[:length], scores[row, :length].tolist()))
        return turns


class EnvhubToolEnv:
    """An envhub episode as a TRL `environment_factory` environment: the model calls `act`.

    `GRPOTrainer(..., environment_factory=EnvhubToolEnv.factory(target, "alfworld"))`; every
    instance shares one connection. `reset(task_id=...)` receives the dataset row.
    """

    def __init__(self, episodes: SessionPort) -> None:
        self._episodes = episodes
        self._turn: EnvView | None = None
        self._reward = 0.0

    @classmethod
    def factory(cls, targets: str | Sequence[str], environment: str, **settings: Any) -> Callable[[], EnvhubToolEnv]:
        """A zero-argument factory; `settings` go to `Sessions.connect` (max_steps, admissible, options, token)."""
        episodes = Sessions.connect(targets, environment, **settings)
        return lambda: cls(episodes)

    def reset(self, task_id: str | None = None, seed: int = 0, **row: Any) -> str:
        """Start the row's task (closing the previous episode) and return its first observation."""
        if task_id is None:
            raise ValueError("each dataset row needs a task_id column naming the envhub task")
        if self._turn is not None:
            self._episodes.end(self._turn.session_id)
        self._turn = self._episodes.start(task_id, seed=seed)
        self._reward = 0.0
        return render_turn(self._turn)

    def act(self, command: str) -> str:
        """Play one text command in the environment.

        Args:
            command: The command to play, for example "go to fridge 1".

        Returns:
            What the environment shows after the command.
        """
        if self._turn is None or self._turn.done:
            raise ValueError("the episode is over; no more commands")
        self._turn = self._episodes.step(self._turn.session_id, command)
        self._reward += self._turn.reward
        return self._turn.text + ("\nThe episode is over." if self._turn.done else "")

    def get_reward(self) -> float:
        """The episode's summed reward so far."""
        return self._reward


def tree_rollout(
    targets: str | Sequence[str],
    environment: str,
    task_id: str,
    act: Policy,
    fork_at: ForkRule,
    *,
    continuations: int = 2,
    depth: int = 1,
    seed: int = 0,
    max_steps: int = 50,
    **settings: Any,
) -> Tree:
    """The episode of `task_id` that `act` plays and `continuations` more from each state `fork_at` picks, `depth`
    levels deep (`envhub.client.tree.play_tree`); `settings` go to `Sessions.connect` (e.g. admissible=True)."""
    episodes = Sessions.connect(targets, environment, **settings)
    try:
        return play_tree(
            episodes, task_id, act, fork_at, continuations=continuations, depth=depth, seed=seed, max_steps=max_steps
        )
    finally:
        episodes.close()
