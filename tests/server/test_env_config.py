"""`envhub serve --env-config / --set`: parsing, validation at start, and the error a user sees."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from envhub import cli
from envhub.server.env_config import environment_config
from envhub.testing import REFERENCE


def test_files_then_sets_build_each_environments_settings(tmp_path: Path) -> None:
    file = tmp_path / "envs.yaml"
    file.write_text("alfworld:\n  rooms: small\n  seed: 1\n")
    config = environment_config(["alfworld", REFERENCE], [str(file)], ["alfworld.seed=3", f"{REFERENCE}.tasks=2"])
    assert config == {"alfworld": {"rooms": "small", "seed": 3}, REFERENCE: {"tasks": 2}}


@pytest.mark.parametrize(
    ("environments", "sets", "message"),
    [
        (["alfworld"], ["alfworld.rooms"], "must look like ENV.KEY=VALUE"),
        (["alfworld"], ["rooms=small"], "must look like ENV.KEY=VALUE"),
        (["alfworld"], ["scienceworld.x=1"], "not served"),
        (["no-such-env"], [], "unknown environment 'no-such-env'"),
    ],
)
def test_malformed_settings_are_refused(environments: list[str], sets: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        environment_config(environments, [], sets)


def test_a_bad_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "envs.yaml"
    file.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="must map environment names to settings"):
        environment_config(["alfworld"], [str(file)], [])


def test_serve_stops_with_the_kinds_message_on_a_bad_value(caplog: pytest.LogCaptureFixture) -> None:
    argv = ["serve", "--env", REFERENCE, "--port", "0", "--set", f"{REFERENCE}.tasks=0"]
    with caplog.at_level(logging.ERROR, logger="envhub"):
        assert cli.main(argv) == 1
    assert "toy.tasks must be a whole number of at least 1, not 0" in caplog.text
    with caplog.at_level(logging.ERROR, logger="envhub"):
        assert cli.main(["serve", "--env", REFERENCE, "--set", "bad"]) == 2
    assert "ENV.KEY=VALUE" in caplog.text
