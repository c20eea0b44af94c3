"""Retrievers: the interface sessions search through, and the embedded BM25 one.

An index folder holds the corpus (`corpus.jsonl`, Search-R1's format), its line offsets and a
`bm25s` index; `build_index` writes it once and `open_index` memory-maps it. Indices are cached
per process by path, so every session of a server worker shares one copy.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from envhub.envs.searchqa.corpus import OFFSETS_SUFFIX, PassageStore, corpus_offsets

CORPUS_FILE = "corpus.jsonl"
BM25_FOLDER = "bm25"
MAX_QUERY_TOKENS = 64
"""Longer queries are cut to their first 64 tokens (BM25 cost grows with query length)."""

_WORD = re.compile(r"\w+")
_STOPWORDS = frozenset(STOPWORDS_EN)


@dataclass(frozen=True)
class Hit:
    """One retrieved passage."""

    id: str
    contents: str
    score: float


class Retriever(Protocol):
    """What a session searches with."""

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        """The `topk` best passages for each query, best first."""
        ...


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without English stop words."""
    return [token for token in _WORD.findall(text.lower()) if token not in _STOPWORDS]


def build_index(corpus: Path, out: Path) -> Path:
    """Index a Search-R1 corpus jsonl into folder `out` (copying the corpus there); returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / CORPUS_FILE
    if corpus.resolve() != target.resolve():
        shutil.copyfile(corpus, target)
    offsets = corpus_offsets(target)
    np.save(out / (CORPUS_FILE + OFFSETS_SUFFIX), offsets)
    store = PassageStore(target, out / (CORPUS_FILE + OFFSETS_SUFFIX))
    model = bm25s.BM25()
    model.index([tokenize(store[row]["contents"]) for row in range(len(store))], show_progress=False)
    model.save(str(out / BM25_FOLDER))
    return out


def is_index(folder: Path) -> bool:
    return (folder / CORPUS_FILE).is_file() and (folder / BM25_FOLDER / "params.index.json").is_file()


class Bm25Retriever:
    """BM25 over a memory-mapped index folder written by `build_index`."""

    def __init__(self, folder: Path) -> None:
        if not is_index(folder):
            raise FileNotFoundError(f"{folder} holds no index; build one with `envhub retriever build`")
        self.folder = folder
        self.passages = PassageStore(folder / CORPUS_FILE, folder / (CORPUS_FILE + OFFSETS_SUFFIX))
        self._model = bm25s.BM25.load(str(folder / BM25_FOLDER), mmap=True)

    def __len__(self) -> int:
        return len(self.passages)

    def rows(self, query: str, topk: int) -> list[tuple[int, float]]:
        """(row, score) of the best `topk` passages with a positive score, best first, ties by row."""
        ids = self._model.get_tokens_ids(tokenize(query)[:MAX_QUERY_TOKENS])
        if not ids or topk <= 0:
            return []
        scores = self._model.get_scores_from_ids(ids)  # a fresh array: ours to change
        ranked: list[tuple[int, float]] = []
        for _ in range(min(topk, len(scores))):  # k argmax passes beat a partition for small k (and keep ties by row)
            row = int(scores.argmax())
            if scores[row] <= 0:
                break
            ranked.append((row, float(scores[row])))
            scores[row] = -np.inf
        return ranked

    def search(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        results = []
        for query in queries:
            hits = []
            for row, score in self.rows(query, topk):
                passage = self.passages[row]
                hits.append(Hit(passage["id"], passage["contents"], score))
            results.append(hits)
        return results


_OPEN: dict[Path, Bm25Retriever] = {}
_LOCK = threading.Lock()


def open_index(folder: Path) -> Bm25Retriever:
    """The process's shared retriever over `folder` (loaded on first use)."""
    key = folder.resolve()
    with _LOCK:
        if key not in _OPEN:
            _OPEN[key] = Bm25Retriever(key)
        return _OPEN[key]
