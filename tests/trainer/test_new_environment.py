"""Adding an environment never edits the trainer: a kind defined only in this file, with its own action format
(template, `<door>` reply tags, stop string, invalid-turn text), installed the way a package is (entry points in
a dist-info on the path), served by a real envhub server that `env.targets: [local]` starts, trains one step.

Only module-level names below are what the "package" ships; the trainer is imported inside the test, so the
server's processes importing this module stay light.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from envhub.client.formats import ActionFormat, tagged_action
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, Observation, StepResult, TaskSpec

DOORS = 3

TEMPLATE = (
    "Doors game. Goal: {task_description}.\n"
    "Turn {current_step}; earlier turns: {step_count}.{action_history}\n"
    "You see: {current_observation}\n"
    "Choices: {admissible_actions}\n"
    "Answer with one choice inside <door></door> tags."
)
INVALID = "Nothing happened: answer with one choice inside <door></door> tags."
FORMAT = ActionFormat(TEMPLATE, parse=tagged_action("door"), stop=("</door>",), invalid_observation=INVALID)
"""The doors game's action format, what its package registers under `envhub.action_formats`."""


class DoorsEnvironment(Environment):
    """Three doors, one prize (behind door `index % 3 + 1`); `open N` opens door N."""

    def __init__(self) -> None:
        self._task = TaskSpec("", "", 0)
        self._opened: list[int] = []

    def _observation(self) -> Observation:
        shut = [door for door in range(1, DOORS + 1) if door not in self._opened]
        text = f"Closed doors: {', '.join(map(str, shut))}." if shut else "Every door is open."
        return Observation(text, "find the prize behind one of the doors")

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        del seed, options
        self._task, self._opened = task, []
        return self._observation()

    def step(self, action: str) -> StepResult:
        door = int(action.split()[-1]) if action.startswith("open ") and action.split()[-1].isdigit() else 0
        if door == self._task.index % DOORS + 1:
            return StepResult(Observation("The prize!", "find the prize behind one of the doors"), 1.0, True, True)
        if 1 <= door <= DOORS and door not in self._opened:
            self._opened.append(door)
        return StepResult(self._observation(), 0.0, terminated=False)

    def admissible_actions(self) -> list[str]:
        return [f"open {door}" for door in range(1, DOORS + 1) if door not in self._opened]

    def native_state(self) -> str:
        return json.dumps(self._opened)

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        self.reset(task, seed=seed, options=options)
        self._opened = [int(door) for door in json.loads(state)]


class DoorsKind(EnvironmentKind):
    """Six training and two test tasks of the doors game."""

    name = "doors"
    version = "1"
    description = "three doors, one prize (defined in tests/trainer/test_new_environment.py)"
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, admissible_actions=True)
    default_max_steps = 4

    def splits(self) -> list[str]:
        return ["train", "test"]

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        return [TaskSpec(f"{split}/{i}", split, i, "doors") for i in range(6 if split == "train" else 2)]

    def create(self) -> Environment:
        return DoorsEnvironment()


def install(folder: Path) -> None:
    """What `pip install doors-env` would leave on the path: a dist-info declaring the kind and its format."""
    info = folder / "doors_env-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: doors-env\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[envhub.environments]\ndoors = test_new_environment:DoorsKind\n\n"
        "[envhub.action_formats]\ndoors = test_new_environment:FORMAT\n"
    )


@pytest.mark.slow
def test_a_kind_defined_here_is_served_and_trains_one_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_models: Any
) -> None:
    from trainer.config import config_from_dict
    from trainer.driver import train
    from trainer.metrics import read_metrics

    site = tmp_path / "site"
    site.mkdir()
    install(site)
    here = str(Path(__file__).parent)
    for path in (here, str(site)):
        monkeypatch.syspath_prepend(path)  # this process (the config check) ...
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), here, os.environ.get("PYTHONPATH", "")]))  # ...server
    config = config_from_dict(
        {
            "steps": 1,
            "output_dir": str(tmp_path / "run"),
            "models": {"student": str(tiny_models.student), "teacher": str(tiny_models.teacher)},
            "backend": {"device": "cpu"},
            "env": {"name": "doors", "targets": ["local"], "max_turns": 2, "eval_split": "test"},
            "prompt": {"history_length": 1, "max_prompt_tokens": 256},
            "rollout": {"group_size": 2, "tasks_per_step": 1, "max_new_tokens": 8},
            "objective": {"name": "grpo"},
            "eval": {"every": 1, "num_tasks": 1},
            "optim": {"lr": 1e-3},
        }
    )
    result = train(config, progress=False)
    assert result.final_step == 1 and result.checkpoint is not None
    [record] = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert record["rollout/trajectories"] == 2.0 and record["rollout/mean_turns"] > 0
    page = (tmp_path / "run" / "episodes" / "step_000001.html").read_text()
    # the prompts are the doors game's template; the random student never closes a <door> tag, so every reply
    # is unparsed and shows the game's own invalid-turn text
    assert html.escape("Answer with one choice inside <door></door> tags.") in page
    assert html.escape(INVALID) in page
