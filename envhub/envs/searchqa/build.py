"""`build_dataset`: the offline Search-QA data (corpus, BM25 index, question splits) in one folder.

Deterministic: the same package versions and settings give the same files. Steps: facts ->
passages -> corpus.jsonl -> BM25 index -> candidate questions -> keep those whose every gold
search retrieves its passage in the top `topk` and, for multi-hop ones, where no passage among
the gold ones and the question's own top 10 holds every named entity and an answer (so one
search cannot do) -> per dataset, a seeded shuffle into test and train (question texts are
deduplicated first, so no test question is in train).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from envhub.envs.searchqa.corpus import Question, write_jsonl
from envhub.envs.searchqa.facts import Facts, load_facts
from envhub.envs.searchqa.passages import write_passages
from envhub.envs.searchqa.protocol import normalize_answer
from envhub.envs.searchqa.questions import DATASETS, MULTI_HOP, Candidate, candidates
from envhub.envs.searchqa.retriever import CORPUS_FILE, Bm25Retriever, build_index

BUILD_VERSION = 1
"""Version of the generated data's layout and templates (part of the kind's version)."""
MANIFEST = "manifest.json"
SPLITS = ("train", "test")


@dataclass(frozen=True)
class BuildConfig:
    """What to build; the defaults are the shipped data set."""

    seed: int = 0
    train_per_dataset: int = 1000
    test_per_dataset: int = 200
    topk: int = 3
    """Gold searches must find their passage within this many results (the protocol's default)."""
    max_cities: int | None = None
    """Keep only the first N cities (and a proportional share of the other facts): small test corpora."""


def _shrink(facts: Facts, max_cities: int | None) -> Facts:
    if max_cities is None:
        return facts
    share = max_cities / max(1, len(facts.cities))
    return Facts(
        countries=facts.countries,
        cities=facts.cities[:max_cities],
        states=facts.states,
        counties=facts.counties[: max(50, int(len(facts.counties) * share))],
        subdivisions=facts.subdivisions[: int(len(facts.subdivisions) * share)],
        languages=facts.languages[: int(len(facts.languages) * share)],
    )


def _needs_several(candidate: Candidate, texts: list[str]) -> bool:
    """No passage names every entity of the question together with an answer."""
    answers = [normalize_answer(a) for a in candidate.answers]
    entities = [normalize_answer(e) for e in candidate.entities]
    for text in texts:
        plain = normalize_answer(text)
        if all(e in plain for e in entities) and any(a and a in plain for a in answers):
            return False
    return True


def _keep(candidate: Candidate, retriever: Bm25Retriever, topk: int) -> bool:
    for query, row in zip(candidate.searches, candidate.gold_rows, strict=True):
        if row not in {found for found, _ in retriever.rows(query, topk)}:
            return False
    if candidate.dataset not in MULTI_HOP:
        return True
    rows = set(candidate.gold_rows) | {row for row, _ in retriever.rows(candidate.question, 10)}
    return _needs_several(candidate, [retriever.passages[row]["contents"] for row in sorted(rows)])


def _split(pool: list[Candidate], config: BuildConfig, retriever: Bm25Retriever) -> dict[str, list[Candidate]]:
    """Shuffle by seed, then take test first and train next, keeping only usable questions."""
    by_text = {c.question: c for c in pool}  # later duplicates of a text replace earlier ones: one text, one split
    order = sorted(by_text)
    random.Random(f"{config.seed}:{pool[0].dataset}").shuffle(order)
    wanted = {"test": config.test_per_dataset, "train": config.train_per_dataset}
    out: dict[str, list[Candidate]] = {"test": [], "train": []}
    split = "test"
    for text in order:
        if len(out[split]) >= wanted[split]:
            if split == "train":
                break
            split = "train"
        if _keep(by_text[text], retriever, config.topk):
            out[split].append(by_text[text])
    return out


def _question(candidate: Candidate, split: str, index: int) -> Question:
    return Question(
        id=f"{candidate.dataset}/{split}/{index:05d}",
        question=candidate.question,
        golden_answers=candidate.answers,
        data_source=candidate.dataset,
        gold_searches=candidate.searches,
    )


def build_dataset(out: Path, config: BuildConfig | None = None) -> dict[str, object]:
    """Write the corpus, index and question splits into `out` (replaced); returns the manifest."""
    config = config or BuildConfig()
    started = time.perf_counter()
    facts = _shrink(load_facts(), config.max_cities)
    book = write_passages(facts)
    staging = out.with_name(out.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write_jsonl(staging / CORPUS_FILE, book.rows_json())
    build_index(staging / CORPUS_FILE, staging)
    retriever = Bm25Retriever(staging)
    pools: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates(facts, book):
        pools[candidate.dataset].append(candidate)
    splits: dict[str, list[Question]] = {split: [] for split in SPLITS}
    counts: dict[str, dict[str, int]] = {}
    for dataset in DATASETS:
        chosen = _split(pools[dataset], config, retriever) if pools[dataset] else {"test": [], "train": []}
        counts[dataset] = {split: len(chosen[split]) for split in SPLITS}
        for split in SPLITS:
            splits[split].extend(_question(c, split, i) for i, c in enumerate(chosen[split]))
    for split in SPLITS:
        write_jsonl(staging / f"{split}.jsonl", (q.to_json() for q in splits[split]))
    manifest: dict[str, object] = {
        "build_version": BUILD_VERSION,
        "config": asdict(config),
        "passages": len(book.texts),
        "questions": counts,
        "build_seconds": round(time.perf_counter() - started, 1),
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return manifest
