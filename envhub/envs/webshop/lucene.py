"""Lucene's English analysis and BM25 scoring, as pyserini's WebShop index applies them, in numpy.

WebShop (`search_engine/run_indexing.sh`) indexes with pyserini's defaults, Anserini's DefaultEnglishAnalyzer:
Lucene's StandardTokenizer, EnglishPossessiveFilter, LowerCaseFilter, StopFilter with Lucene's English stop
set, PorterStemFilter; it searches with `LuceneSearcher` (BM25, k1 = 0.9, b = 0.4) through Anserini's
bag-of-words query (each distinct query term a SHOULD clause boosted by its count). Here:

* `analyze(text)`: the StandardTokenizer's word rules (Unicode UAX #29) as far as a regex can follow them:
  letters and digits run together ("12oz"), a letter-letter or digit-digit pair joined by `'` `'` or `.`
  stays one token ("men's", "3.5", "e.g"), digit groups by `,` or `;` ("1,000"), letters by `:`; every other
  character splits; CJK ideographs and kana are one token each. Then possessive "'s" removed, lower case,
  Lucene's 33 English stop words removed, Porter stemming (NLTK's Porter stemmer in Martin Porter's own
  variant, which Lucene's PorterStemmer ports).
* `LuceneBm25`: Lucene 8+'s BM25Similarity, including its lossy document length: the field length is stored
  as one byte (`SmallFloat.intToByte4`: exact below 24, then 4 significant bits) and scored through the
  decoded length, so documents of nearby lengths score as Lucene scores them. Per term and document
  `w - w / (1 + f * n)` in float32 with `w = boost * idf`, `idf = ln(1 + (N - df + 0.5) / (df + 0.5))`,
  `n = 1 / (k1 * ((1 - b) + b * L / avgdl))`; clause scores summed in float64 and rounded to float32, as
  Lucene's disjunction sums them; ties go to the lower document id (catalogue order).

Not matched offline: UAX #29's rarer word classes (Hebrew letters, Katakana runs across marks, emoji
sequences) and Lucene's exact float rounding of `w - w / (1 + f * n)` when two products tie to the last bit.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import cache

import numpy as np

K1 = 0.9
B = 0.4
"""pyserini's LuceneSearcher BM25 defaults (Anserini's)."""

ENGLISH_STOP_WORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    }
)
"""Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET."""

_LETTER = r"[^\W\d_]"
_WORD = re.compile(
    rf"(?:[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])"  # one ideograph or kana
    rf"|(?:\w(?:(?<={_LETTER})['\u2019.:](?={_LETTER})|(?<=\d)[.,;'\u2019](?=\d))?)+"
)


def _runs(text: str) -> list[str]:
    """StandardTokenizer's tokens (see the module docstring); `_` joins like a letter (UAX #29 ExtendNumLet)."""
    return [m.group(0) for m in _WORD.finditer(text)]


@cache
def _stemmer() -> object:
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)


@cache
def _stem(word: str) -> str:
    stem: str = _stemmer().stem(word, to_lowercase=False)  # type: ignore[attr-defined]
    return stem


def analyze(text: str) -> list[str]:
    """Anserini's DefaultEnglishAnalyzer: tokens, possessives removed, lower-cased, stop words out, stemmed."""
    out = []
    for token in _runs(text):
        if token[-2:].lower() in ("'s", "\u2019s"):
            token = token[:-2]
        word = token.lower()
        if word and word not in ENGLISH_STOP_WORDS:
            out.append(_stem(word))
    return out


def _long_to_int4(value: int) -> int:
    bits = value.bit_length()
    if bits < 4:
        return value
    shift = bits - 4
    return ((value >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(value: int) -> int:
    bits, shift = value & 0x07, (value >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_FREE = 255 - _long_to_int4(2**31 - 1)
"""SmallFloat's NUM_FREE_VALUES (24): lengths below it are stored exactly."""


def length_to_byte(length: int) -> int:
    """`SmallFloat.intToByte4`: the one-byte norm Lucene stores for a field of `length` tokens."""
    return length if length < _FREE else _FREE + _long_to_int4(length - _FREE)


def byte_to_length(norm: int) -> int:
    """`SmallFloat.byte4ToInt`: the length Lucene scores a stored norm byte as."""
    return norm if norm < _FREE else min(_FREE + _int4_to_long(norm - _FREE), 2**31 - 1)


LENGTH_TABLE = np.array([byte_to_length(i) for i in range(256)], dtype=np.float32)


class LuceneBm25:
    """A term x document matrix of Lucene's BM25 denominators 1 + f * n (float32, CSR by term); `scores` applies
    a bag-of-words query to it."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, idf: np.ndarray, docs: int):
        self.data, self.indices, self.indptr, self.idf, self.docs = data, indices, indptr, idf, docs

    @classmethod
    def index(cls, corpus: Sequence[Sequence[str]], vocab: dict[str, int], k1: float = K1, b: float = B) -> LuceneBm25:
        """Index analysed documents (their terms in `vocab`, term -> row)."""
        docs = len(corpus)
        lengths = np.array([len(doc) for doc in corpus], dtype=np.int64)
        avgdl = np.float32(lengths.sum() / max(docs, 1))
        norms = np.array([length_to_byte(int(n)) for n in lengths], dtype=np.int64)
        k1f, bf = np.float32(k1), np.float32(b)
        inverse = np.float32(1) / (k1f * ((np.float32(1) - bf) + bf * LENGTH_TABLE / avgdl))  # Lucene's cache[]
        rows: list[list[tuple[int, float]]] = [[] for _ in vocab]
        for doc, terms in enumerate(corpus):
            for term, count in Counter(terms).items():
                rows[vocab[term]].append((doc, float(count)))
        data: list[np.float32] = []
        indices: list[int] = []
        indptr = [0]
        df = np.zeros(len(vocab), dtype=np.float64)
        for row, postings in enumerate(rows):
            df[row] = len(postings)
            for doc, freq in postings:
                data.append(np.float32(1) + np.float32(freq) * inverse[norms[doc]])
                indices.append(doc)
            indptr.append(len(indices))
        idf = np.log(1 + (docs - df + 0.5) / (df + 0.5)).astype(np.float32)
        return cls(
            np.asarray(data, dtype=np.float32), np.asarray(indices, dtype=np.int32), np.asarray(indptr), idf, docs
        )

    def scores(self, query_terms: Sequence[int]) -> np.ndarray:
        """Each document's score for a query given as term rows (repeats boost a term, as Anserini's query)."""
        total = np.zeros(self.docs, dtype=np.float64)
        for term, boost in Counter(query_terms).items():
            weight = np.float32(boost) * self.idf[term]
            start, end = self.indptr[term], self.indptr[term + 1]
            total[self.indices[start:end]] += weight - weight / self.data[start:end]  # float32, as Lucene
        return total.astype(np.float32)
