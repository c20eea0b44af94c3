"""WebShop tests build their search indexes under a temporary cache, per module (workers inherit the variable)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module", autouse=True)
def webshop_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("webshop-cache"))
    before = os.environ.get("ENVHUB_CACHE")
    os.environ["ENVHUB_CACHE"] = path
    yield path
    if before is None:
        del os.environ["ENVHUB_CACHE"]
    else:
        os.environ["ENVHUB_CACHE"] = before
