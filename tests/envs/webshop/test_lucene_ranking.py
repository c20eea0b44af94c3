"""WebShop search ranks as pyserini's Lucene index does: Lucene's English analysis and BM25 (k1 0.9, b 0.4) with
its one-byte document lengths.

How the expected ranking was obtained (by hand, from Lucene 8's BM25Similarity and SmallFloat, written out in
`expected_scores` below with math.log and the decoded lengths; no code from the module under test):
query "running shoes" -> terms run, shoe. Six documents in catalogue order, lengths after analysis
2, 3, 1, 2, 103, 100 (avgdl = 211 / 6 = 35.17); df(run) = 4, df(shoe) = 5, N = 6, so
idf(run) = ln(1 + 2.5 / 4.5) = 0.4418 and idf(shoe) = ln(1 + 1.5 / 5.5) = 0.2412. Lucene stores lengths 103
and 100 both as byte 57, decoded 96, so documents 4 and 5 tie at 0.4418 * 1/(1 + 1.5226) + 0.2412 *
1/(1 + 1.5226) = 0.2707 and the lower document id (4) comes first; with exact lengths document 5 (0.2664) would
beat document 4 (0.2633). Scores: d1 0.4973 (run twice), d3 0.2831, d4 = d5 0.2707, d2 0.1556, d0 0.1546:
ranking [1, 3, 4, 5, 2, 0].
"""

from __future__ import annotations

import math

import pytest

from envhub.envs.webshop.lucene import K1, B, LuceneBm25, analyze, byte_to_length, length_to_byte

FILLER_103 = " ".join(f"f{i}" for i in range(101))
FILLER_100 = " ".join(f"g{i}" for i in range(98))
DOCS = [
    "leather shoes",
    "running shoes for running",
    "shoes",
    "running socks",
    f"running shoes {FILLER_103}",
    f"running shoes {FILLER_100}",
]


def expected_scores(corpus: list[list[str]], query: list[str]) -> list[float]:
    """Lucene 8 BM25 by its formula, in float64, lengths through the norm byte (decoded by the table below)."""
    decoded = {1: 1, 2: 2, 3: 3, 100: 96, 103: 96}  # SmallFloat.byte4ToInt(intToByte4(n)), worked by hand
    n = len(corpus)
    avgdl = sum(len(d) for d in corpus) / n
    scores = []
    for doc in corpus:
        total = 0.0
        for term in set(query):
            df = sum(term in d for d in corpus)
            tf = doc.count(term)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                total += query.count(term) * idf * tf / (tf + K1 * (1 - B + B * decoded[len(doc)] / avgdl))
        scores.append(total)
    return scores


def test_lucene_english_analysis() -> None:
    assert analyze("Running Shoes for men") == ["run", "shoe", "men"]  # stop word out, Porter stems
    assert analyze("Men's size 10.5, 1,000 pcs; x-large e.g. 12oz") == [
        "men",  # possessive removed
        "size",
        "10.5",  # digits joined by '.' or ','
        "1,000",
        "pc",
        "x",  # '-' splits
        "larg",
        "e.g",  # letters joined by '.'
        "12oz",  # letters and digits run together
    ]
    assert analyze("THE A an") == [] and analyze("s m l") == ["s", "m", "l"]  # one-letter sizes are terms


def test_norm_byte_is_exact_below_24_then_four_significant_bits() -> None:
    assert [byte_to_length(length_to_byte(n)) for n in (0, 1, 23, 24, 31, 100, 103, 150, 300)] == [
        0, 1, 23, 24, 31, 96, 96, 144, 280
    ]  # fmt: skip
    assert length_to_byte(100) == length_to_byte(103) == 57
    lengths = [byte_to_length(b) for b in range(256)]
    assert lengths == sorted(lengths) and lengths[255] == 24 + 15 * 2**27  # the largest encodable length


def test_ranking_matches_lucene_bm25_with_its_length_norms() -> None:
    corpus = [analyze(text) for text in DOCS]
    assert [len(d) for d in corpus] == [2, 3, 1, 2, 103, 100]
    vocab: dict[str, int] = {}
    for doc in corpus:
        for term in doc:
            vocab.setdefault(term, len(vocab))
    index = LuceneBm25.index(corpus, vocab)
    query = analyze("running shoes")
    scores = index.scores([vocab[t] for t in query])
    assert scores.tolist() == pytest.approx(expected_scores(corpus, query), rel=1e-6)
    ranking = sorted(range(len(DOCS)), key=lambda d: (-scores[d], d))
    assert ranking == [1, 3, 4, 5, 2, 0]
    assert scores[4] == scores[5]  # 103 and 100 tokens share Lucene's norm byte: a tie, document order decides
    doubled = index.scores([vocab[t] for t in analyze("running running shoes")])  # a repeated term boosts it
    assert doubled[3] == pytest.approx(2 * scores[3], rel=1e-6)
