"""`ChatTokens`: a multi-turn episode's token ids through the tokenizer's chat template.

The token-level adapters (TRL's rollout, verl's agent loop) and the envhub trainer's prompts
(`trainer.prompts.chat`) encode turns with it. The adapters build one growing sequence: the first
observation as a user turn, the model's reply as the assistant turn, each next observation as a
user turn, and so on, the way verl and TRL tokenise conversations. With a chat template:

* `prompt(text)`: the system message (if any) and `text` as the first user turn, ending with the
  assistant generation prompt (`apply_chat_template(..., add_generation_prompt=True)`);
* `feedback(text, closed)`: what the template puts between a reply and the next reply: the end of
  the assistant turn (left out when the model already sampled its end-of-turn token, `closed`),
  `text` as a user turn, and the next generation prompt. It is taken once from the template by
  rendering a probe conversation, so every template that renders earlier turns unchanged works.

A tokenizer without a chat template (a base model) keeps raw text: `prompt` and `feedback` are
`text` encoded without special tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

_MARK = "\x00ENVHUB-TEXT\x00"
"""Stands for the environment's text in the probe conversation (never in a real observation)."""


class ChatTokens:
    """Token ids of the turns of one conversation format (a tokenizer, an optional system message)."""

    def __init__(
        self, tokenizer: Any, *, system: str | None = None, template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.templated = bool(getattr(tokenizer, "chat_template", None))
        self._system = [{"role": "system", "content": system}] if system else []
        self._kwargs = dict(template_kwargs or {})

    def _render(self, messages: list[dict[str, str]]) -> str:
        text = self.tokenizer.apply_chat_template(
            self._system + messages, tokenize=False, add_generation_prompt=True, **self._kwargs
        )
        return str(text)

    @functools.cached_property
    def _around(self) -> tuple[str, str]:
        """(before, after) the user text between one assistant reply and the next generation prompt (probed once,
        on the first `feedback`)."""
        opened = self._render([{"role": "user", "content": "x"}]) + "y"
        replied = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
        full = self._render([*replied, {"role": "user", "content": _MARK}])
        if not full.startswith(opened):
            raise ValueError(
                "the tokenizer's chat template renders an earlier assistant turn differently from what was "
                "generated (it rewrites history), so a multi-turn episode cannot be one growing sequence"
            )
        before, _, after = full[len(opened) :].partition(_MARK)
        return before, after

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt(self, text: str) -> list[int]:
        """The first turn: `text` from the user, then the assistant's generation prompt."""
        if not self.templated:
            return self.encode(text)
        return self.encode(self._render([{"role": "user", "content": text}]))

    def feedback(self, text: str, closed: bool = True) -> list[int]:
        """After a reply: the environment's `text` as the next user turn, then the generation prompt. `closed`:
        the reply ended with the end-of-turn token the template would write (the model's EOS)."""
        if not self.templated:
            return self.encode(text)
        before, after = self._around
        end = str(self.tokenizer.eos_token or "")
        if closed and end and before.startswith(end):
            before = before[len(end) :]
        return self.encode(before + text + after)

    def closes(self, ids: list[int]) -> bool:
        """Whether a sampled reply ended with the model's EOS (its end-of-turn token)."""
        return bool(ids) and ids[-1] == self.tokenizer.eos_token_id
