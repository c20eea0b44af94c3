"""The backend contract (docs/design/002-trainer.md): generation with log-probs, teacher scoring, weight sync."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from torch import Tensor

FinishReason = Literal["stop", "length"]

AllowedReplies = Sequence[Sequence[Sequence[int]] | None]
"""Per prompt, the complete token sequences its response may be (None: unconstrained)."""

TopTokens = list[tuple[int, float]]
"""At one position, the most likely next tokens as (token id, log-prob) pairs, most likely first."""


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample one `generate` call."""

    max_new_tokens: int = 64
    """Response length cap; a response that reaches it finishes with reason "length"."""
    temperature: float = 1.0
    """0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling (1 disables it)."""
    top_k: int = 0
    """Top-k sampling (0 disables it)."""
    top_logprobs: int = 0
    """Record this many most likely (token, log-prob) pairs per response token."""
    seed: int | None = None
    """Makes the call reproducible; None draws a fresh seed."""
    constrain: Literal["tokens", "replies"] = "tokens"
    """How `generate`'s `allowed` limits a response: `tokens` (sampled token by token, what no allowed sequence
    continues with masked) or `replies` (one allowed sequence drawn whole, by the model's probability of each,
    normalised over them at `temperature`; top-k and top-p do not apply); trainer/backends/constraint.py."""


@dataclass
class Generation:
    """One sampled response."""

    token_ids: list[int]
    """Response tokens, EOS (or the stop token) included when produced."""
    logprobs: list[float]
    """Log-prob of each response token under the untempered (T = 1) distribution: the learner's logp_old."""
    top_logprobs: list[TopTokens] | None
    """Per response token, the `top_logprobs` most likely (token id, log-prob) pairs, most likely first."""
    finish_reason: FinishReason
    """"stop" (EOS or a stop string was produced) or "length" (max_new_tokens reached)."""
    listed_logprobs: list[float] | None = None
    """Drawn among listed replies (`choice`): the total log-prob of each of them (T = 1), in their order, from the
    scoring the draw used; None otherwise."""


@runtime_checkable
class GenerationBackend(Protocol):
    """Samples responses for a batch of tokenised prompts and accepts new weights from the learner."""

    def generate(
        self, prompts: list[list[int]], sampling: SamplingSettings, allowed: AllowedReplies | None = None
    ) -> list[Generation]:
        """One Generation per prompt, sampled as `sampling` says (temperature 0 is greedy; a seed makes
        the call reproducible); `allowed` limits a prompt's response to one of its token sequences
        (trainer/backends/constraint.py; a backend that cannot raises NotImplementedError)."""
        ...

    def update_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """Replace the model weights (names as in the HF model's state_dict)."""
        ...

    def sleep(self, level: int) -> None:
        """Free accelerator memory while the learner updates (vLLM sleep levels 1 and 2)."""
        ...

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Reallocate what `sleep` freed: `tags` among "weights", "kv_cache" (None: everything)."""
        ...


@runtime_checkable
class ScoringBackend(Protocol):
    """Teacher-forced log-probs of given responses."""

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Log-prob of each response token given the prompt and the previous response tokens."""
        ...

    def score_top(
        self, prompts: list[list[int]], responses: list[list[int]], top_k: int
    ) -> tuple[list[list[float]], list[list[TopTokens]]]:
        """`score`'s log-probs and, at each response token, the `top_k` most likely tokens there (the forward KL
        over the teacher's top tokens, docs/design/053)."""
        ...
