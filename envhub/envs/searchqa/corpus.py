"""Corpus and question files in Search-R1's formats.

* Corpus: JSON lines `{"id": ..., "contents": "\\"Title\\"\\ntext"}`; a `PassageStore` reads
  passages by row through a memory map and an offsets array, so every process maps one copy.
* Questions: JSON lines or parquet rows with `question` and `golden_answers` (Search-R1's
  `nq_search`-style files); optional `id`, `data_source` and `gold_searches` (ours: the queries
  the expert issues).
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

OFFSETS_SUFFIX = ".offsets.npy"


@dataclass(frozen=True)
class Question:
    """One question with every accepted answer."""

    id: str
    question: str
    golden_answers: tuple[str, ...]
    data_source: str = ""
    gold_searches: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "data_source": self.data_source,
            "gold_searches": list(self.gold_searches),
        }


def write_jsonl(path: Path, rows: Iterable[dict[str, object]]) -> None:
    """Write rows as JSON lines (UTF-8, one object per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _read_rows(path: Path) -> Iterator[dict[str, object]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise ValueError(f"{path}: reading parquet needs pyarrow (pip install pyarrow), or give a .jsonl") from exc
        yield from pq.read_table(path).to_pylist()
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{number}: expected a JSON object")
                yield row


def _answers(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(str(answer) for answer in value)
    return ()


def read_questions(path: Path) -> list[Question]:
    """Questions from a Search-R1 jsonl or parquet file; ValueError names the bad row."""
    questions = []
    for number, row in enumerate(_read_rows(path)):
        text, answers = row.get("question"), _answers(row.get("golden_answers"))
        if not isinstance(text, str) or not text.strip() or not answers:
            raise ValueError(f"{path}: row {number} needs a 'question' and non-empty 'golden_answers'")
        questions.append(
            Question(
                id=str(row.get("id", number)),
                question=text.strip(),
                golden_answers=answers,
                data_source=str(row.get("data_source") or ""),
                gold_searches=_answers(row.get("gold_searches")),
            )
        )
    return questions


def corpus_offsets(path: Path) -> np.ndarray:
    """Byte offset of every line of a corpus jsonl, plus the end (n + 1 values); checks each row."""
    offsets = [0]
    with path.open("rb") as handle:
        for number, line in enumerate(handle):
            row = json.loads(line)
            if not isinstance(row, dict) or not isinstance(row.get("contents"), str) or "id" not in row:
                raise ValueError(f"{path}: row {number} needs 'id' and a string 'contents'")
            offsets.append(offsets[-1] + len(line))
    return np.asarray(offsets, dtype=np.int64)


class PassageStore(Sequence[dict[str, str]]):
    """Passages of a corpus jsonl by row number, read through a memory map."""

    def __init__(self, path: Path, offsets_path: Path) -> None:
        self.path = path
        self._offsets = np.load(offsets_path, mmap_mode="r", allow_pickle=False)
        with path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, row: int) -> dict[str, str]:  # type: ignore[override]
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        data = json.loads(self._map[start:end])
        return {"id": str(data["id"]), "contents": data["contents"]}
