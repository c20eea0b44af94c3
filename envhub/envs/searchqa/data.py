"""Where a Search-QA kind finds its questions and its retriever.

* `ENVHUB_SEARCHQA_DATA`: a folder with question files `<split>.jsonl` or `<split>.parquet`
  (Search-R1's format; every such file is a split) and, unless a remote retriever is given,
  an index built by `envhub retriever build` (corpus.jsonl and bm25/).
* `ENVHUB_SEARCHQA_INDEX`: the index folder, when it is not the data folder.
* `ENVHUB_SEARCHQA_RETRIEVER`: URL of a Search-R1 compatible retrieval server, used instead.

Without `ENVHUB_SEARCHQA_DATA` the generated data set is used, from
`$ENVHUB_CACHE/searchqa/v<BUILD_VERSION>` (or `~/.cache/envhub/...`); the first process that
needs it builds it (under a file lock, so concurrent workers build it once).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from envhub.envs.searchqa.build import BUILD_VERSION, MANIFEST, build_dataset
from envhub.envs.searchqa.corpus import Question, read_questions
from envhub.envs.searchqa.retriever import is_index

DATA_ENV = "ENVHUB_SEARCHQA_DATA"
INDEX_ENV = "ENVHUB_SEARCHQA_INDEX"
RETRIEVER_ENV = "ENVHUB_SEARCHQA_RETRIEVER"
PREFERRED_SPLITS = ("train", "dev", "valid", "test")


def default_data_dir() -> Path:
    """`$ENVHUB_CACHE/searchqa/v<N>`, or `~/.cache/envhub/searchqa/v<N>`."""
    base = os.environ.get("ENVHUB_CACHE") or str(Path.home() / ".cache" / "envhub")
    return Path(base) / "searchqa" / f"v{BUILD_VERSION}"


def ensure_default_data(folder: Path | None = None) -> Path:
    """The generated data folder, built first when missing (once, under a lock)."""
    folder = folder or default_data_dir()
    if (folder / MANIFEST).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / MANIFEST).is_file():
            build_dataset(folder)
    return folder


@dataclass(frozen=True)
class DataSource:
    """Question splits plus where to retrieve from."""

    splits: dict[str, list[Question]]
    folder: Path
    """The folder the question files were read from."""
    index: Path | None
    retriever_url: str
    digest: str
    """Short hash of the question files: part of the kind's version (a snapshot restores on other data only by a
    verified replay)."""


def _question_files(folder: Path) -> dict[str, Path]:
    files = {p.stem: p for p in sorted(folder.glob("*.parquet"))}
    files.update({p.stem: p for p in sorted(folder.glob("*.jsonl")) if p.stem != "corpus"})
    order = [s for s in PREFERRED_SPLITS if s in files] + sorted(s for s in files if s not in PREFERRED_SPLITS)
    return {split: files[split] for split in order}


def load_source(data: str | Path | None = None, index: str | Path | None = None, retriever_url: str = "") -> DataSource:
    """Questions and retriever settings from the arguments, else the environment variables, else the default."""
    data = data or os.environ.get(DATA_ENV) or ensure_default_data()
    folder = Path(data)
    retriever_url = retriever_url or os.environ.get(RETRIEVER_ENV, "")
    index_dir = Path(index or os.environ.get(INDEX_ENV) or folder)
    files = _question_files(folder)
    if not files:
        raise FileNotFoundError(f"{folder} holds no question files (<split>.jsonl or <split>.parquet)")
    if not retriever_url and not is_index(index_dir):
        raise FileNotFoundError(
            f"{index_dir} holds no BM25 index: build one with `envhub retriever build --corpus <corpus.jsonl> "
            f"--out {index_dir}`, or set {RETRIEVER_ENV} to a retrieval server"
        )
    digest = hashlib.sha256()
    splits = {}
    for split, path in files.items():
        digest.update(split.encode() + b"\0" + path.read_bytes())
        splits[split] = read_questions(path)
    return DataSource(splits, folder, None if retriever_url else index_dir, retriever_url, digest.hexdigest()[:12])
