"""Product search: a BM25 index (`bm25s`) built once per catalogue, memory-mapped, shared per process.

WebShop searches a Lucene BM25 index whose document for a product is its title, description,
first bullet point and option text ("color: red, blue, and size: s, m"), lower-cased, and shows
the top 50 hits. Here the same documents are tokenised into lower-case words of two or more
characters, English stop words removed (bm25s's list) and a plural "s" folded ("shoes" ->
"shoe"; Lucene's English analyzer stems more), then indexed with bm25s's default BM25
(k1=1.5, b=0.75). The index is written once under `$ENVHUB_CACHE/webshop/index-<fingerprint>`
(default `~/.cache/envhub`) and loaded memory-mapped, so the server's worker processes share
its pages. A query keeps its first `MAX_QUERY_TOKENS` tokens; products scoring 0 (no query
word) are never hits; ties go to catalogue order.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.records import Product

TOP_K = 50
"""Search results kept (WebShop's SEARCH_RETURN_N)."""
MAX_QUERY_TOKENS = 64

_TOKEN = re.compile(r"\w\w+")
_STOPWORDS = frozenset(STOPWORDS_EN)


def tokenize(text: str) -> list[str]:
    """Lower-case words of 2+ characters, stop words removed, a plural "s" folded."""
    out = []
    for word in _TOKEN.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
        out.append(word)
    return out


def document(product: Product) -> str:
    """The text WebShop indexes for a product."""
    option_text = ", and ".join(f"{group}: {', '.join(values)}" for group, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


def cache_root() -> Path:
    base = os.environ.get("ENVHUB_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "envhub") / "webshop"


class SearchIndex:
    """BM25 over one catalogue's products; `search` returns asins, best first."""

    def __init__(self, catalog: Catalog, folder: Path | None = None) -> None:
        self.asins: tuple[str, ...] = tuple(catalog.products)
        self.folder = folder or cache_root() / f"index-{catalog.fingerprint}"
        if not (self.folder / "params.index.json").is_file():
            _build(catalog, self.folder)
        self._bm25 = bm25s.BM25.load(str(self.folder), mmap=True, show_progress=False)
        self._vocab: dict[str, int] = self._bm25.vocab_dict

    def search(self, query: str, k: int = TOP_K) -> list[str]:
        ids = [self._vocab[t] for t in tokenize(query)[:MAX_QUERY_TOKENS] if t in self._vocab]
        if not ids:
            return []
        scores = np.asarray(self._bm25.get_scores_from_ids(ids))
        if len(scores) > k:
            cut = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th best score
            top = np.flatnonzero(scores >= max(cut, np.nextafter(0, 1)))
        else:
            top = np.flatnonzero(scores > 0)
        order = np.lexsort((top, -scores[top]))[:k]  # best first, ties in catalogue order
        return [self.asins[i] for i in top[order]]


def _build(catalog: Catalog, folder: Path) -> None:
    """Index the catalogue into `folder`, atomically (concurrent builders agree on the result)."""
    corpus = [tokenize(document(product)) for product in catalog.products.values()]
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    retriever.save(str(staging), show_progress=False)
    try:
        os.rename(staging, folder)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)


_SHARED: dict[str, SearchIndex] = {}
_LOCK = threading.Lock()


def shared_index(catalog: Catalog) -> SearchIndex:
    """The process's one index for `catalog` (built or loaded on first use)."""
    with _LOCK:
        index = _SHARED.get(catalog.fingerprint)
        if index is None:
            index = _SHARED[catalog.fingerprint] = SearchIndex(catalog)
        return index


def page(results: Sequence[str], number: int, size: int = 10) -> Sequence[str]:
    """Results shown on result page `number` (1-based), `size` per page."""
    return results[(number - 1) * size : number * size]
