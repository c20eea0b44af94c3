"""Keys and values kept between `generate` calls, found by token prefix, bounded by LRU (docs/design/019)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import DynamicCache


@dataclass(frozen=True)
class KVEntry:
    """One sequence's keys and values: per layer (key, value), each (kv heads, len(tokens), head dim)."""

    tokens: tuple[int, ...]
    layers: tuple[tuple[Tensor, Tensor], ...]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)


class KVStore:
    """Entries keyed by their tokens; `find` returns the longest entry that is a prefix of a prompt.
    Least recently used entries are evicted once the total exceeds `max_bytes` (0 keeps nothing)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], KVEntry] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        """Prompts that reused an entry (for tests and the bench)."""
        self.reused_tokens = 0
        """Prompt tokens not recomputed thanks to the store."""

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, prompt: Sequence[int]) -> KVEntry | None:
        """The longest kept entry whose tokens start `prompt` and leave at least one prompt token to compute."""
        best: KVEntry | None = None
        for tokens, entry in self._entries.items():
            size = len(tokens)
            if size < len(prompt) and (best is None or size > len(best.tokens)) and tuple(prompt[:size]) == tokens:
                best = entry
        if best is not None:
            self._entries.move_to_end(best.tokens)
        return best

    def put(self, entry: KVEntry) -> None:
        """Keep `entry` (replacing one with the same tokens), then evict down to `max_bytes`."""
        self.drop(entry.tokens)
        size = entry.nbytes
        if size > self.max_bytes:
            return
        self._entries[entry.tokens] = entry
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.nbytes -= old.nbytes

    def drop(self, tokens: tuple[int, ...]) -> None:
        """Forget the entry of `tokens` if kept."""
        old = self._entries.pop(tokens, None)
        if old is not None:
            self.nbytes -= old.nbytes

    def clear(self) -> None:
        """Forget everything (the weights changed: the keys and values belong to the old ones)."""
        self._entries.clear()
        self.nbytes = 0


def batch_cache(entries: Sequence[KVEntry | None], lengths: Sequence[int]) -> tuple[DynamicCache, Tensor]:
    """A DynamicCache holding, for row i, the first `lengths[i]` positions of `entries[i]`, left-padded to the
    longest, and its (B, C) attention mask (1 at kept positions). Rows without an entry have length 0."""
    width = max(lengths)
    mask = torch.zeros((len(entries), width), dtype=torch.long)
    cache = DynamicCache()
    sample = next(entry for entry in entries if entry is not None)
    for layer, (key0, value0) in enumerate(sample.layers):
        keys = key0.new_zeros((len(entries), key0.shape[0], width, key0.shape[2]))
        values = value0.new_zeros((len(entries), value0.shape[0], width, value0.shape[2]))
        for row, (entry, length) in enumerate(zip(entries, lengths, strict=True)):
            if entry is None or length == 0:
                continue
            key, value = entry.layers[layer]
            keys[row, :, width - length :] = key[:, :length]
            values[row, :, width - length :] = value[:, :length]
        cache.update(keys, values, layer)
    for row, length in enumerate(lengths):
        if length:
            mask[row, width - length :] = 1
    return cache, mask.to(sample.layers[0][0].device)


def _keys_values(layer: object) -> tuple[Tensor, Tensor]:
    """A cache layer's (B, kv heads, T, head dim) keys and values (attention layers only)."""
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if not isinstance(keys, Tensor) or not isinstance(values, Tensor):
        raise TypeError(f"cannot keep a {type(layer).__name__} cache layer: set backend.kv_cache_mb to 0")
    return keys, values


def split_cache(cache: DynamicCache, mask: Tensor, rows: Sequence[Sequence[int]]) -> list[KVEntry]:
    """Per row i, the entry of `rows[i]`: the first len(rows[i]) positions the (B, T') `mask` marks as real
    (T' >= the cache length T; positions past T are ignored) of each layer of the batched `cache`."""
    layers = [_keys_values(layer) for layer in cache.layers]
    length = layers[0][0].shape[2]
    entries: list[KVEntry] = []
    for row, tokens in enumerate(rows):
        index = mask[row, :length].nonzero().squeeze(-1)[: len(tokens)]
        entries.append(
            KVEntry(
                tuple(tokens),
                tuple((k[row].index_select(1, index), v[row].index_select(1, index)) for k, v in layers),
            )
        )
    return entries
