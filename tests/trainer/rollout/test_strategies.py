"""Rollout strategies as plugins: a strategy registered here brings its config section (validated at load, listed
in the reference), its needs (remedies at load) and its driver step, without a line of the trainer naming it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from trainer.config import ConfigError, config_from_dict, reference_markdown
from trainer.rollout import strategies
from trainer.rollout.strategies import Strategy, get_strategy, register_strategy
from trainer.rollout.types import Trajectory


@dataclass(frozen=True)
class ProbeSettings:
    """Settings of the probe strategy."""

    width: int = 2
    label: str = "x"

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError("probe.width must be at least 1")


def probe_needs(config: Any) -> Mapping[str, bool]:
    return {"rollout.group_size: 1 (the probe plays one per task)": config.rollout.group_size == 1}


def probe_step(
    config: Any, workers: Any, tasks: Sequence[tuple[str, int]], sampling: Any, step: int
) -> tuple[list[Trajectory], dict[str, float]]:
    return [], {"probe/width": float(PROBE.settings_of(config).width)}


PROBE = Strategy(
    "probe",
    lambda parts: strategies.make_strategy("group", parts),
    step=probe_step,
    section="probe",
    settings=ProbeSettings,
    needs=probe_needs,
    plotted=("probe/width",),
)


@pytest.fixture
def probe() -> Iterator[Strategy]:
    strategies.strategy_names()  # the built-in plugins first
    register_strategy(PROBE)
    yield PROBE
    del strategies._STRATEGIES["probe"]


def test_a_plugin_section_is_accepted_validated_and_documented(probe: Strategy) -> None:
    config = config_from_dict(
        {"rollout": {"strategy": "probe", "group_size": 1}, "objective": {"name": "opd"}, "probe": {"width": 5}}
    )
    assert probe.settings_of(config) == ProbeSettings(width=5)
    assert config.model_dump()["probe"] == {"width": 5}  # saved with the run's config.json
    assert get_strategy("probe").step is probe_step
    assert probe.step is not None and probe.step(config, None, [], None, 0)[1] == {"probe/width": 5.0}
    assert "### `probe` (rollout strategy `probe`): Settings of the probe strategy." in reference_markdown()
    with pytest.raises(ConfigError, match="unknown probe setting"):
        config_from_dict({"probe": {"depth": 1}})
    with pytest.raises(ConfigError, match=r"probe.width must be at least 1"):
        config_from_dict({"probe": {"width": 0}})


def test_a_selected_plugin_names_what_it_needs(probe: Strategy) -> None:
    config_from_dict({"rollout": {"group_size": 4}, "probe": {"width": 3}})  # not selected: nothing needed
    with pytest.raises(ConfigError, match=r"rollout.strategy 'probe' needs rollout.group_size: 1"):
        config_from_dict({"rollout": {"strategy": "probe", "group_size": 4}})


def test_an_unknown_top_level_section_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown section.*probe.*known: steps, seed"):
        config_from_dict({"probe": {"width": 1}})


def test_a_section_has_one_owner(probe: Strategy) -> None:
    with pytest.raises(ValueError, match="already belongs to strategy 'probe'"):
        register_strategy(Strategy("other", PROBE.build, section="probe", settings=ProbeSettings))
