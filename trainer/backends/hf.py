"""Generation and scoring with a transformers causal LM (CPU or GPU), with exact per-token log-probs.

Generation is a plain sampling loop over the KV cache (not `generate()`), so the returned log-probs
are the untempered log-softmax of the very logits the token was drawn from; `score()` recomputes
the same quantity teacher-forced, and the two agree to float precision.

With `kv_cache_mb`, the keys and values of each generated row are kept (`KVStore`) and a later prompt that
extends one (a full-context chat's next turn) prefills only its new tokens. `score()` runs one forward per
longest row of a prefix chain and reads every contained row's log-probs from it (docs/design/019).

With `decode_attention`, the decode steps (one new token a row) run that attention implementation and the prefill
and `score()` the model's own: on the CPU, SDPA's flash kernel spends most of a one-query step (docs/design/029),
transformers' eager attention does not (docs/design/033).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from trainer.backends.base import AllowedReplies, FinishReason, Generation, SamplingSettings, TopTokens
from trainer.backends.constraint import ReplyConstraint, choose_replies, constraints_for, mask_disallowed
from trainer.backends.kv_store import KVEntry, KVStore, batch_cache, split_cache
from trainer.backends.listed import listed_reply_token_logprobs, packed_groups, packed_length, reply_top_logprobs
from trainer.backends.padding import left_pad
from trainer.backends.sampling import sample_next
from trainer.models.loading import load_model, load_tokenizer

SCORE_CHUNK = 1024
"""Positions projected to the vocabulary at a time in `score()` (fp32 log-softmax temporaries: chunk x vocab)."""
REPLY_BATCH_TOKENS = 8192
"""Padded tokens (turns x the longest's prompt and listed replies) of one listed-reply forward (`score_replies`, the
rollout's choice): bounds its attention mask and activations; a turn longer than this goes alone."""


def prefix_leaves(rows: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """(leaves, leaf_of): `leaves` are the indices of rows contained in no longer row as a prefix, longest first;
    `leaf_of[i]` is the position in `leaves` of the leaf row i is read from (a leaf: its own)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    leaves: list[int] = []
    leaf_of = [0] * len(rows)
    for i in order:
        row = list(rows[i])
        found = next((k for k, leaf in enumerate(leaves) if list(rows[leaf][: len(row)]) == row), None)
        if found is None:
            found = len(leaves)
            leaves.append(i)
        leaf_of[i] = found
    return leaves, leaf_of


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
        kv_cache_mb: float = 0,
        decode_attention: str | None = None,
        width_multiple: int = 1,
    ) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size
        self._stop = _StopMatcher(set(eos_token_ids), stop, tokenizer)
        self.kv_store = KVStore(int(kv_cache_mb * 1024 * 1024)) if kv_cache_mb > 0 else None
        """Keys and values kept between `generate` calls (None: off)."""
        self.decode_attention = decode_attention
        """Attention implementation of the decode steps (`backend.decode_attention`; None: the model's own)."""
        self.width_multiple = width_multiple
        """Listed-reply forwards pad their rows to a multiple of this many tokens (`backend.score_width_multiple`)."""
        self._dropped: list[tuple[torch.nn.Parameter, torch.Size]] | None = None
        """The parameters a level-2 `sleep` freed, with their shapes, until `update_weights` (None: loaded)."""
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
        kv_cache_mb: float = 0,
        decode_attention: str | None = None,
        width_multiple: int = 1,
    ) -> HFBackend:
        """Load the model (in `dtype`: bf16 on the CPU when `precision.cpu_bf16` says so) and tokenizer from a
        local HF folder."""
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
            kv_cache_mb=kv_cache_mb,
            decode_attention=decode_attention,
            width_multiple=width_multiple,
        )

    @torch.inference_mode()
    def generate(
        self, prompts: list[list[int]], sampling: SamplingSettings, allowed: AllowedReplies | None = None
    ) -> list[Generation]:
        """Sample a response per prompt (see `GenerationBackend.generate`), `batch_size` prompts at a time."""
        if any(not prompt for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        constraints = constraints_for(allowed, len(prompts))
        self._check_weights()
        generator = torch.Generator(device=self.device)
        generator.manual_seed(secrets.randbits(63) if sampling.seed is None else sampling.seed)
        results: dict[int, Generation] = {}
        if allowed is not None and sampling.constrain == "replies":
            results = self._choose_replies(prompts, allowed, sampling, generator)
        free = [i for i in range(len(prompts)) if i not in results]
        for start in range(0, len(free), self.batch_size):
            rows = free[start : start + self.batch_size]
            made = self._generate_batch([prompts[i] for i in rows], sampling, generator, [constraints[i] for i in rows])
            results.update(zip(rows, made, strict=True))
        return [results[i] for i in range(len(prompts))]

    def _choose_replies(
        self, prompts: list[list[int]], allowed: AllowedReplies, sampling: SamplingSettings, generator: torch.Generator
    ) -> dict[int, Generation]:
        """Per prompt with a list, the reply drawn among its listed ones (`choose_replies`) with its log-probs (and
        top-k with `sampling.top_logprobs`), every list scored in packed forwards (`score_replies`)."""
        rows = [i for i, choices in enumerate(allowed) if choices is not None]
        if not rows:
            return {}
        lists = [[list(choice) for choice in allowed[i] or ()] for i in rows]
        if not all(listed and all(listed) for listed in lists):
            raise ValueError("a reply is chosen among one or more non-empty token sequences")
        scores = self.score_replies([prompts[i] for i in rows], lists)
        picks = choose_replies(scores, sampling, generator)
        chosen = [listed[pick] for listed, pick in zip(lists, picks, strict=True)]
        tops: list[list[list[tuple[int, float]]] | None] = [None] * len(rows)
        if sampling.top_logprobs:
            k = min(sampling.top_logprobs, self.model.get_output_embeddings().out_features)
            tops = list(
                reply_top_logprobs(
                    self.model, [prompts[i] for i in rows], chosen, k, self.pad_token_id, self.width_multiple
                )
            )
        return {
            i: Generation(reply, listed[pick], top, "stop", listed_logprobs=[sum(tokens) for tokens in listed])
            for i, reply, listed, pick, top in zip(rows, chosen, scores, picks, tops, strict=True)
        }

    def _generate_batch(
        self,
        prompts: list[list[int]],
        sampling: SamplingSettings,
        generator: torch.Generator,
        constraints: list[ReplyConstraint | None],
    ) -> list[Generation]:
        top_logprobs = sampling.top_logprobs
        kept, cache, ids, mask, positions = self._prefill_inputs(prompts)
        n = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in range(n)]
        reasons: list[FinishReason] = ["length"] * n
        active = list(range(n))
        step_ids, step_positions = ids, positions
        own = self.model.config._attn_implementation
        try:
            for step in range(sampling.max_new_tokens):
                if step == 1 and self.decode_attention is not None:
                    self.model.set_attn_implementation(self.decode_attention)
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
                    mask_disallowed(logits, constraints, active),
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
                    constraint = constraints[i]
                    if constraint is not None:
                        constraint.advance(chosen_list[i])
                    if self._stop.stopped(tokens[i]) or (constraint is not None and constraint.exhausted):
                        reasons[i] = "stop"
                    else:
                        still_active.append(i)
                active = still_active
                if not active:
                    break
                step_ids = chosen[:, None]
                step_positions = step_positions[:, -1:] + 1
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        finally:
            self.model.set_attn_implementation(own)
        if self.kv_store is not None:
            self._keep(kept, cache, mask, [list(p) + t[:-1] for p, t in zip(prompts, tokens, strict=True)])
        return [Generation(tokens[i], logprobs[i], tops[i] if top_logprobs else None, reasons[i]) for i in range(n)]

    def _prefill_inputs(
        self, prompts: list[list[int]]
    ) -> tuple[list[KVEntry | None], DynamicCache, Tensor, Tensor, Tensor]:
        """The kept entries each prompt extends, the batched cache built from them, and the (B, L) ids,
        attention mask (cache positions first) and positions of the prompt tokens still to compute."""
        kept: list[KVEntry | None] = [None] * len(prompts)
        if self.kv_store is not None:
            kept = [self.kv_store.find(prompt) for prompt in prompts]
        lengths = [len(entry.tokens) if entry is not None else 0 for entry in kept]
        if not any(lengths):
            ids, mask, positions = left_pad(prompts, self.pad_token_id, self.device)
            return kept, DynamicCache(), ids, mask, positions
        assert self.kv_store is not None
        self.kv_store.hits += sum(1 for length in lengths if length)
        self.kv_store.reused_tokens += sum(lengths)
        cache, cache_mask = batch_cache(kept, lengths)
        rest = [prompt[length:] for prompt, length in zip(prompts, lengths, strict=True)]
        ids, mask, positions = left_pad(rest, self.pad_token_id, self.device)
        positions = positions + torch.tensor(lengths, device=self.device)[:, None]
        return kept, cache, ids, torch.cat([cache_mask.to(self.device), mask], dim=-1), positions

    def _keep(self, used: list[KVEntry | None], cache: DynamicCache, mask: Tensor, rows: list[list[int]]) -> None:
        """Store each row's keys and values (prompt + response but its last token, never fed); the entries
        the prompts extended are dropped (the new ones contain them)."""
        assert self.kv_store is not None
        for entry in used:
            if entry is not None:
                self.kv_store.drop(entry.tokens)
        for entry in split_cache(cache, mask, rows):
            self.kv_store.put(entry)

    def score(self, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
        """Teacher-forced log-probs of each response token. A row contained in a longer row (a full-context
        chat's earlier turn) is read from the longer row's forward; `batch_size` such longest rows at a time."""
        return self.score_top(prompts, responses, 0)[0]

    @torch.inference_mode()
    def score_top(
        self, prompts: list[list[int]], responses: list[list[int]], top_k: int
    ) -> tuple[list[list[float]], list[list[TopTokens]]]:
        """`score`'s log-probs, and at each response token the `top_k` most likely next tokens with their
        log-probs, most likely first (empty lists with `top_k` 0): the teacher's side of the forward KL over its
        top tokens (`token_kl: forward`, docs/design/053)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        if any(not prompt for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        self._check_weights()
        rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
        leaves, leaf_of = prefix_leaves(rows)
        scores: list[list[float]] = [[] for _ in rows]
        tops: list[list[TopTokens]] = [[] for _ in rows]
        for start in range(0, len(leaves), self.batch_size):
            stop = min(start + self.batch_size, len(leaves))
            # (row, its leaf's index in this batch, prompt length, response length)
            spans = [
                (i, leaf_of[i] - start, len(prompts[i]), len(responses[i]))
                for i in range(len(rows))
                if start <= leaf_of[i] < stop and responses[i]
            ]
            if spans:
                logps, top = self._score_spans([rows[leaf] for leaf in leaves[start:stop]], spans, top_k)
                for (i, *_), logp, row_top in zip(spans, logps, top, strict=True):
                    scores[i], tops[i] = logp, row_top
        return scores, tops

    @torch.inference_mode()
    def score_replies(self, prompts: list[list[int]], replies: list[list[list[int]]]) -> list[list[list[float]]]:
        """The log-prob of every token of each listed reply of each prompt (reply-level OPD's teacher side,
        `trainer.backends.listed`; a reply's total is their sum), shortest first, one forward per group of at most
        `batch_size` prompts and `REPLY_BATCH_TOKENS` padded tokens (a group pads to its longest turn)."""
        self._check_weights()
        lengths = [packed_length(prompt, listed) for prompt, listed in zip(prompts, replies, strict=True)]
        scores: list[list[list[float]]] = [[] for _ in prompts]
        for part in packed_groups(lengths, self.batch_size, REPLY_BATCH_TOKENS):
            scored = listed_reply_token_logprobs(
                self.model,
                [prompts[i] for i in part],
                [replies[i] for i in part],
                self.pad_token_id,
                self.width_multiple,
            )
            for i, listed in zip(part, scored, strict=True):
                scores[i] = [tokens.tolist() for tokens in listed]
        return scores

    def _score_spans(
        self, leaf_rows: list[list[int]], spans: list[tuple[int, int, int, int]], top_k: int = 0
    ) -> tuple[list[list[float]], list[list[TopTokens]]]:
        """One forward over `leaf_rows`; per (row, leaf, prompt length, response length) span, the log-probs of
        the response tokens at their positions in the leaf (vocabulary projection only there, chunked), and the
        `top_k` most likely tokens at each (empty with `top_k` 0)."""
        ids, mask, positions = left_pad(leaf_rows, self.pad_token_id, self.device)
        hidden = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        width = ids.shape[1]
        leaf_index = torch.cat([torch.full((count,), leaf, dtype=torch.long) for _, leaf, _, count in spans])
        place = torch.cat(
            [torch.arange(count) + width - len(leaf_rows[leaf]) + prompt for _, leaf, prompt, count in spans]
        )
        leaf_index, place = leaf_index.to(self.device), place.to(self.device)
        targets, states = ids[leaf_index, place], hidden[leaf_index, place - 1]
        head = self.model.get_output_embeddings()
        logps, top_logps, top_ids = [], [], []
        for chunk, target in zip(states.split(SCORE_CHUNK), targets.split(SCORE_CHUNK), strict=True):
            log_softmax = torch.log_softmax(head(chunk).float(), dim=-1)
            logps.append(log_softmax.gather(-1, target[:, None]).squeeze(-1))
            if top_k:
                top = log_softmax.topk(top_k, dim=-1)
                top_logps.append(top.values)
                top_ids.append(top.indices)
        counts = [count for *_, count in spans]
        logp = [part.tolist() for part in torch.cat(logps).split(counts)]
        if not top_k:
            return logp, [[] for _ in spans]
        pairs = zip(torch.cat(top_ids).split(counts), torch.cat(top_logps).split(counts), strict=True)
        tops = [
            [list(zip(i, v, strict=True)) for i, v in zip(ids_part.tolist(), values.tolist(), strict=True)]
            for ids_part, values in pairs
        ]
        return logp, tops

    def update_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """Copy the learner's weights in (strict: names and shapes must match; cast to this model's dtype);
        the kept keys and values belong to the old weights and are dropped."""
        self._allocate_weights()
        self.model.load_state_dict(dict(state_dict), strict=True)
        self._dropped = None
        if self.kv_store is not None:
            self.kv_store.clear()
        self.memory_events.append("load_weights")

    def reload_weights(self, fill: Callable[[torch.nn.Module], bool]) -> bool:
        """After a level-2 `sleep`: reallocate the weights and let `fill` write them in place (the frozen
        teacher's, read from its folder: `update_weights` would need a whole second model first); whether
        `fill` did (False: they count as freed still, and `update_weights` must come)."""
        self._allocate_weights()
        if not fill(self.model):
            return False
        self._dropped = None
        if self.kv_store is not None:
            self.kv_store.clear()
        self.memory_events.append("load_weights")
        return True

    def sleep(self, level: int) -> None:
        """Drop the kept keys and values; level 2 frees the weights too, as vLLM's level 2 discards them (the
        colocated learner update runs meanwhile): the next `update_weights` brings new ones, and generating or
        scoring before it raises. Recorded in `memory_events`."""
        if self.kv_store is not None:
            self.kv_store.clear()
        if level >= 2 and self._dropped is None:
            self._dropped = [(p, p.shape) for p in self.model.parameters()]
            for param, _ in self._dropped:
                param.data = param.data.new_empty(0)
        self.memory_events.append(f"sleep:{level}")

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Reallocate the weights a level-2 sleep freed (tag `weights`; their values come with the next
        `update_weights`); recorded in `memory_events`."""
        if tags is None or "weights" in tags:
            self._allocate_weights()
        self.memory_events.append("wake:" + ",".join(tags or ["all"]))

    @property
    def weights_freed(self) -> bool:
        """A level-2 `sleep` freed the weights and no `update_weights` has brought them back yet."""
        return self._dropped is not None

    def _allocate_weights(self) -> None:
        """Storage of the original shapes for weights a level-2 sleep freed (values unset)."""
        for param, shape in self._dropped or []:
            if param.numel() != shape.numel():
                param.data = param.data.new_empty(shape)

    def _check_weights(self) -> None:
        if self._dropped is not None:
            raise RuntimeError("the hf backend's weights were freed by sleep(2): update_weights must come first")
