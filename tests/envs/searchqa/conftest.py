"""A small Search-QA data set (real facts, ~4k passages) built once for every Search-QA test, and a tiny user folder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envhub.envs.searchqa.build import BuildConfig, build_dataset
from envhub.envs.searchqa.corpus import write_jsonl
from envhub.envs.searchqa.data import DATA_ENV, INDEX_ENV, RETRIEVER_ENV
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.retriever import build_index

SMALL = BuildConfig(max_cities=2000, train_per_dataset=12, test_per_dataset=6)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The small data set, also named by ENVHUB_SEARCHQA_DATA (server workers inherit it)."""
    folder = tmp_path_factory.mktemp("searchqa") / "data"
    build_dataset(folder, SMALL)
    saved = {name: os.environ.pop(name, None) for name in (DATA_ENV, INDEX_ENV, RETRIEVER_ENV)}
    os.environ[DATA_ENV] = str(folder)
    yield folder
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value


@pytest.fixture(scope="session")
def kind(data_dir: Path) -> SearchQAKind:
    return SearchQAKind(data_dir)


def _write_search_r1_files(folder: Path, parquet: bool) -> None:
    corpus = [
        {"id": "0", "contents": '"Ada Lovelace"\nAda Lovelace wrote the first published algorithm in 1843.'},
        {"id": "1", "contents": '"Charles Babbage"\nCharles Babbage designed the Analytical Engine.'},
        {"id": "2", "contents": '"Analytical Engine"\nThe Analytical Engine was a proposed mechanical computer.'},
    ]
    write_jsonl(folder / "corpus.jsonl", corpus)
    build_index(folder / "corpus.jsonl", folder / "index")
    rows = [
        {
            "id": "test_0",
            "question": "Who designed the Analytical Engine?",
            "golden_answers": ["Charles Babbage"],
            "data_source": "nq",
        },
        {"id": "test_1", "question": "When was the first algorithm published?", "golden_answers": ["1843"]},
    ]
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), folder / "test.parquet")
    else:
        write_jsonl(folder / "test.jsonl", rows)


@pytest.fixture(scope="session")
def write_search_r1_files() -> Callable[[Path, bool], None]:
    """Writes a user's data in Search-R1's formats into a folder: three passages (index in `<folder>/index`)
    and two test questions, `test_0` with a data source (as parquet when the flag is true)."""
    return _write_search_r1_files
