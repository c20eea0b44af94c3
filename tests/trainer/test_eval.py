"""`trainer eval`'s sample-episodes page beside a teacher: the teacher is checked before any episode is played."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trainer.config import TrainerConfig
from trainer.eval import evaluate
from trainer.models.tiny import TinyModels


def test_a_missing_teacher_stops_the_evaluation_before_its_episodes(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str
) -> None:
    config = alfworld_config(alfworld_server, eval={"num_tasks": 1})
    config.models.teacher = str(tmp_path / "no-teacher")
    turns: list[object] = []
    with pytest.raises(FileNotFoundError, match="no-teacher"):
        evaluate(config, targets=[alfworld_server], html=tmp_path / "page.html", on_turn=lambda *a: turns.append(a))
    assert turns == []


def test_the_page_shades_the_gap_for_a_policy_other_than_the_configs_student(
    tmp_path: Path, alfworld_config: Callable[..., TrainerConfig], alfworld_server: str, tiny_models: TinyModels
) -> None:
    config = alfworld_config(alfworld_server, eval={"num_tasks": 1})
    config.models.student = str(tmp_path / "not-made-yet")  # only the evaluated policy and the teacher exist
    page = tmp_path / "page.html"
    result = evaluate(config, str(tiny_models.student), targets=[alfworld_server], html=page)
    assert result.tasks == 1 and page.stat().st_size > 0
    assert 'title="gap ' in page.read_text()  # tokens shaded by the teacher-student gap
