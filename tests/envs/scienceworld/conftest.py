"""One ScienceWorld kind (one JVM) shared by every ScienceWorld test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envhub.envs.scienceworld.kind import ScienceWorldKind


@pytest.fixture(scope="session")
def kind() -> Iterator[ScienceWorldKind]:
    kind = ScienceWorldKind()
    yield kind
    kind.close()
