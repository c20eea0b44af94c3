"""The generated data (splits, answers in the corpus, hops) and Search-R1 files from a user's folder."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from envhub.core.session import Session
from envhub.envs.searchqa.build import BuildConfig, build_dataset
from envhub.envs.searchqa.corpus import read_questions
from envhub.envs.searchqa.kind import SearchQAKind
from envhub.envs.searchqa.protocol import normalize_answer
from envhub.envs.searchqa.questions import MULTI_HOP
from envhub.envs.searchqa.retriever import open_index


def test_no_test_question_is_in_train_and_builds_are_deterministic(data_dir: Path, tmp_path: Path) -> None:
    train = {q.question for q in read_questions(data_dir / "train.jsonl")}
    test = {q.question for q in read_questions(data_dir / "test.jsonl")}
    assert train and test and not train & test
    again = tmp_path / "again"
    build_dataset(again, BuildConfig(max_cities=2000, train_per_dataset=12, test_per_dataset=6))
    for name in ("corpus.jsonl", "train.jsonl", "test.jsonl"):
        assert (again / name).read_bytes() == (data_dir / name).read_bytes(), name


def test_every_answer_is_in_a_gold_passage_and_multi_hop_needs_two_searches(data_dir: Path) -> None:
    index = open_index(data_dir)
    for question in read_questions(data_dir / "test.jsonl") + read_questions(data_dir / "train.jsonl"):
        found = [index.search([query], 3)[0] for query in question.gold_searches]
        last = " ".join(normalize_answer(hit.contents) for hit in found[-1])
        if question.data_source == "2wikimultihopqa":
            last = " ".join(normalize_answer(hit.contents) for hits in found for hit in hits)
        assert any(normalize_answer(a) in last for a in question.golden_answers), question
        assert len(question.gold_searches) >= (2 if question.data_source in MULTI_HOP else 1)


@pytest.mark.parametrize("parquet", [False, True])
def test_search_r1_files_load_from_a_user_folder(
    tmp_path: Path, parquet: bool, write_search_r1_files: Callable[[Path, bool], None]
) -> None:
    if parquet:
        pytest.importorskip("pyarrow")
    write_search_r1_files(tmp_path, parquet)
    kind = SearchQAKind(tmp_path, index=tmp_path / "index")
    assert kind.splits() == ["test"] and [s.task_id for s in kind.tasks("test")] == ["test_0", "test_1"]
    session = Session.start(kind, kind.task("test_0"))
    text = session.step("<search>Analytical Engine designed</search>").result.observation.text
    assert text.startswith("<information>Doc 1(Title: Charles Babbage) Charles Babbage designed")
    assert session.step("<answer>charles babbage</answer>").result.won
    again = Session.start(kind, kind.task("test_1"))
    assert again.expert_actions() == ["<answer>1843</answer>"]  # no gold searches in the file: the answer alone


def test_bad_question_files_name_the_row(tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "Who?", "golden_answers": []}) + "\n")
    with pytest.raises(ValueError, match="row 0"):
        read_questions(tmp_path / "test.jsonl")


@pytest.mark.slow
def test_full_build_has_50k_passages_and_every_dataset(tmp_path: Path) -> None:
    manifest = build_dataset(tmp_path / "full")
    assert isinstance(manifest["passages"], int) and manifest["passages"] >= 50_000
    counts = manifest["questions"]
    assert isinstance(counts, dict) and all(row["test"] == 200 and row["train"] >= 100 for row in counts.values())


def test_the_held_out_set_takes_the_families_in_turn(kind: SearchQAKind) -> None:
    """Search-QA's test split lists its seven datasets one after another: its first tasks are one dataset's, while
    `eval.families_in_turn` takes the first of each, then the second of each (the papers' mixed validation set)."""
    from trainer.config import load_config
    from trainer.held_out import held_out_tasks

    class Listing:  # the server's ListTasks answer, read from the real kind
        def task_ids(self, split: str, families: Sequence[str] = ()) -> list[str]:
            return [s.task_id for s in kind.tasks(split) if not families or s.family in families]

    overrides = ["env.eval_split=test", "eval.num_tasks=9"]
    config = load_config("ladder-searchqa.yaml", [*overrides, "eval.num_tasks=6"])  # the small set: 6 a dataset
    [first] = held_out_tasks(config, Listing()).values()
    assert {task.partition("/")[0] for task in first} == {"nq"}
    families = ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"]
    config = load_config("ladder-searchqa.yaml", [*overrides, f"eval.families_in_turn=[{', '.join(families)}]"])
    [mixed] = held_out_tasks(config, Listing()).values()
    assert [task.partition("/")[0] for task in mixed] == [*families, "nq", "triviaqa"]
    assert mixed[7] == first[1]  # each family's own order kept
