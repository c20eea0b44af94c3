"""Product search: WebShop's Lucene BM25 index (`envhub.envs.webshop.lucene`), built once per catalogue,
memory-mapped, shared per process.

WebShop searches a pyserini (Lucene) index whose document for a product is its title, description, first
bullet point and option text ("color: red, blue, and size: s, m"), lower-cased, with BM25 k1 = 0.9, b = 0.4,
and shows the top 50 hits, 10 per page. Here the same documents go through Lucene's English analysis
(StandardTokenizer rules, possessives, Lucene's stop words, Porter stemming) and Lucene's BM25 with its
one-byte document lengths (`lucene.py` says what is and is not matched). The index is written once under
`$ENVHUB_CACHE/webshop/lucene-index-<fingerprint>` (default `~/.cache/envhub`) and loaded memory-mapped, so the
server's worker processes share its pages. A query keeps its first `MAX_QUERY_TOKENS` terms; products scoring 0
(no query term) are never hits; ties go to catalogue order (Lucene's document order).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from envhub.envs.webshop.catalog import Catalog
from envhub.envs.webshop.lucene import LuceneBm25, analyze
from envhub.envs.webshop.records import Product

TOP_K = 50
"""Search results kept (WebShop's SEARCH_RETURN_N)."""
PAGE_SIZE = 10
"""Results per page (WebShop's PRODUCT_WINDOW)."""
MAX_QUERY_TOKENS = 64
_ARRAYS = ("data", "indices", "indptr", "idf")


def tokenize(text: str) -> list[str]:
    """The terms Lucene's English analysis makes of `text` (`lucene.analyze`)."""
    return analyze(text)


def document(product: Product) -> str:
    """The text WebShop indexes for a product."""
    option_text = ", and ".join(f"{group}: {', '.join(values)}" for group, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


def cache_root() -> Path:
    base = os.environ.get("ENVHUB_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "envhub") / "webshop"


class SearchIndex:
    """Lucene BM25 over one catalogue's products; `search` returns asins, best first."""

    def __init__(self, catalog: Catalog, folder: Path | None = None) -> None:
        self.asins: tuple[str, ...] = tuple(catalog.products)
        self.folder = folder or cache_root() / f"lucene-index-{catalog.fingerprint}"
        if not (self.folder / "vocab.json").is_file():
            _build(catalog, self.folder)
        arrays = {name: np.load(self.folder / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
        self._bm25 = LuceneBm25(**arrays, docs=len(self.asins))
        self._vocab: dict[str, int] = json.loads((self.folder / "vocab.json").read_text())

    def search(self, query: str, k: int = TOP_K) -> list[str]:
        ids = [self._vocab[t] for t in tokenize(query)[:MAX_QUERY_TOKENS] if t in self._vocab]
        if not ids:
            return []
        scores = self._bm25.scores(ids)
        hits = np.flatnonzero(scores > 0)
        order = np.lexsort((hits, -scores[hits]))[:k]  # best first, ties by document id
        return [self.asins[i] for i in hits[order]]


def _build(catalog: Catalog, folder: Path) -> None:
    """Index the catalogue into `folder`, atomically (concurrent builders agree on the result)."""
    corpus = [tokenize(document(product)) for product in catalog.products.values()]
    vocab: dict[str, int] = {}
    for terms in corpus:
        for term in terms:
            vocab.setdefault(term, len(vocab))
    index = LuceneBm25.index(corpus, vocab)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    for name in _ARRAYS:
        np.save(staging / f"{name}.npy", getattr(index, name))
    (staging / "vocab.json").write_text(json.dumps(vocab))
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


def page(results: Sequence[str], number: int, size: int = PAGE_SIZE) -> Sequence[str]:
    """Results shown on result page `number` (1-based), `size` per page."""
    return results[(number - 1) * size : number * size]
