"""Generation and scoring with a transformers causal LM (CPU or GPU), with exact per-token log-probs.

Generation is a plain sampling loop over the KV cache (not `generate()`), so the returned log-probs
are the untempered log-softmax of the very logits the token was drawn from; `score()` recomputes
the same quantity teacher-forced, and the two agree to float precision.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends.base import FinishReason, Generation, SamplingSettings
from trainer.backends.sampling import sample_next
from trainer.models.loading import load_model, load_tokenizer


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Left-pad token rows -> (input_ids, attention_mask, position_ids), each (B, L)."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


class _StopMatcher:
    """Decides whether a response has just produced a stop token or completed a stop string."""

    def __init__(
        self, stop_token_ids: set[int], stop_strings: Sequence[str], tokenizer: PreTrainedTokenizerBase | None
    ) -> None:
        self.stop_token_ids = set(stop_token_ids)
        self.strings: list[str] = []
        for text in stop_strings:
            ids = tokenizer.encode(text, add_special_tokens=False) if tokenizer is not None else []
            if len(ids) == 1:
                self.stop_token_ids.add(ids[0])
            elif tokenizer is None:
                raise ValueError(f"stop string {text!r} needs a tokenizer to be detected")
            else:
                self.strings.append(text)
        self.tokenizer = tokenizer
        # A token decodes to at least one byte, so the last len(bytes) tokens cover any stop string.
        self.window = max((len(s.encode()) for s in self.strings), default=0)

    def stopped(self, response: list[int]) -> bool:
        if response[-1] in self.stop_token_ids:
            return True
        if not self.strings or self.tokenizer is None:
            return False
        tail = str(self.tokenizer.decode(response[-self.window :]))
        # `in`, not `endswith`: the token that completes a stop string may carry a few more characters.
        return any(s in tail for s in self.strings)


class HFBackend:
    """A `GenerationBackend` and `ScoringBackend` over a transformers causal LM.

    `stop` strings end a response (like EOS) when they are produced; single-token strings such as
    "</action>" cost nothing, longer ones are matched on the decoded tail and need `tokenizer`.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        tokenizer: PreTrainedTokenizerBase | None = None,
        stop: Sequence[str] = (),
        batch_size: int = 64,
    ) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size
        self._stop = _StopMatcher(set(eos_token_ids), stop, tokenizer)
        self.memory_events: deque[str] = deque(maxlen=64)
        """The latest sleep / wake / weight-load calls, in order (the colocated schedule, docs/gpu.md)."""

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        stop: Sequence[str] = (),
        batch_size: int = 64,
    ) -> HFBackend:
        """Load the model and tokenizer from a local HF folder."""
        tokenizer = load_tokenizer(path)
        model = load_model(path, dtype=dtype, device=device)
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        return cls(
            model,
            eos_token_ids=eos,
            pad_token_id=tokenizer.pad_token_id,
            tokenizer=tokenizer,
            stop=stop,
            batch_size=batch_size,
        )

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], sampling: SamplingSettings) -> list[Generation]:
        """Sample a response per prompt (see `GenerationBackend.generate`), `batch_size` prompts at a time."""
        if any(not prompt for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        generator = torch.Generator(device=self.device)
        generator.manual_seed(secrets.randbits(63) if sampling.seed is None else sampling.seed)
        results: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            results += self._generate_batch(prompts[start : start + self.batch_size], sampling, generator)
        return results

    def _generate_batch(
        self, prompts: list[list[int]], sampling: SamplingSettings, generator: torch.Generator
    ) -> list[Generation]:
        top_logprobs = sampling.top_logprobs
        ids, mask, positions = left_pad(prompts, self.pad_token_id, self.device)
        n = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(n)]
        reasons: list[FinishReason] = ["length"] * n
        active = list(range(n))
        cache = DynamicCache()
        step_ids, step_positions = ids, positions
        for _ in range(sampling.max_new_tokens):
            out = self.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=step_positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,  # the prompt's other positions' logits would be B x L x V (10 GB at batch 64)
            )
            logits = out.logits[:, -1, :].float()
            logp = torch.log_softmax(logits, dim=-1)
            chosen = sample_next(
                logits,
                temperature=sampling.temperature,
                top_k=sampling.top_k,
                top_p=sampling.top_p,
                generator=generator,
            )
            chosen_logp = logp.gather(-1, chosen[:, None]).squeeze(-1)
            top = torch.topk(logp, min(top_logprobs, logp.shape[-1]), dim=-1) if top_logprobs else None
            chosen_list, chosen_logp_list = chosen.tolist(), chosen_logp.tolist()
            still_active = []
            for i in active:
                tokens[i].append(chosen_list[i])
                logprobs[i].append(chosen_logp_list[i])
                if top is not None:
                    tops[i].append(list(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True)))
                if self._stop.stopped(tokens[i]):
                    reasons[i] = "stop"
                else:
                    still_active.append(i)
            active = still_active
            if not active:
                break
            step_ids = chosen[:, None]
            step_positions = step_positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        return [Generation(tokens[i], logprobs[i], tops[i] if top_logprobs else None, reasons[i]) for i in range(n)]

    @torch.inference_mode()
    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Teacher-forced log-probs of each response token, `batch_size` rows at a time."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if any(not prompt for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        scores: list[list[float]] = []
        for start in range(0, len(prompts), self.batch_size):
            end = start + self.batch_size
            scores += self._score_batch(prompts[start:end], responses[start:end])
        return scores

    def _score_batch(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        ids, mask, positions = left_pad(rows, self.pad_token_id, self.device)
        longest = max(len(r) for r in responses)
        if longest == 0:
            return [[] for _ in responses]
        # Left padding aligns every row's end, so the last `longest + 1` logits cover all responses.
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=longest + 1
        ).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, -longest:, None]).squeeze(-1)
        return [logp[i, longest - len(r) :].tolist() for i, r in enumerate(responses)]

    def update_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """Copy the learner's weights in (strict: names and shapes must match)."""
        self.model.load_state_dict(dict(state_dict), strict=True)
        self.memory_events.append("load_weights")

    def sleep(self, level: int) -> None:
        """Nothing to free (no KV cache kept between calls); recorded in `memory_events`."""
        self.memory_events.append(f"sleep:{level}")

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to reallocate; recorded in `memory_events`."""
        self.memory_events.append("wake:" + ",".join(tags or ["all"]))
