"""ALFWorld room sizes: whole floor plans by default, "small" as a named variant, both from server configuration."""

from __future__ import annotations

import pytest

from envhub.envs.alfworld.generator.scene import ROOMS
from envhub.envs.alfworld.kind import AlfWorldKind


def test_whole_rooms_are_the_default_and_small_is_named() -> None:
    assert "-whole-" in AlfWorldKind.from_config({}).version
    small = AlfWorldKind.from_config({"rooms": "small", "seed": "3"})
    assert "-seed3-r5-10d2-6" in small.version and dict(small.config()) == {"rooms": "small", "seed": "3"}
    assert ROOMS["whole"].whole and not ROOMS["small"].whole


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"rooms": "huge"}, "alfworld.rooms must be one of whole, small"),
        ({"seed": "-1"}, "alfworld.seed must be a whole number of at least 0"),
        ({"data": "/no/such/folder"}, "is not a folder"),
        ({"colour": "red"}, "unknown configuration key"),
    ],
)
def test_bad_configuration_is_refused_with_its_reason(config: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AlfWorldKind.from_config(config)
