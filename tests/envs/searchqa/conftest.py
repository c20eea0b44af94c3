"""A small Search-QA data set (real facts, ~4k passages) built once for every Search-QA test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.envs.searchqa.build import BuildConfig, build_dataset
from envhub.envs.searchqa.data import DATA_ENV, INDEX_ENV, RETRIEVER_ENV
from envhub.envs.searchqa.kind import SearchQAKind

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
