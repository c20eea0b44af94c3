"""`SearchQAKind`: Search-R1 style question answering as an envhub environment kind.

One kind object per worker process holds the questions and one retriever (the memory-mapped
BM25 index, or a client of a remote retrieval server) shared by every session of the process.
Where the data comes from is described in `envhub.envs.searchqa.data`; a server sets it, the
passages per search and the turn limit with `--set searchqa.KEY=VALUE` (`config_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from envhub.core import errors
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.core.settings import whole_number
from envhub.envs.searchqa.data import DATA_ENV, INDEX_ENV, RETRIEVER_ENV, DataSource, load_source
from envhub.envs.searchqa.env import DEFAULT_TOPK, MAX_TOPK, SearchQAEnv, topk_option
from envhub.envs.searchqa.remote import RemoteRetriever
from envhub.envs.searchqa.retriever import Retriever, open_index

ENV_VERSION = "1"
"""Version of this environment's behaviour (observations, rewards, native snapshot layout)."""
DEFAULT_MAX_TURNS = 4
"""The default turn limit of a session: BranchOPD's Search-QA setting ("at most four interaction steps are
allowed"); Search-R1's own training script uses `max_turns=2`."""


def _task_specs(source: DataSource) -> dict[str, list[TaskSpec]]:
    """TaskSpecs per split; ids are the questions' own when unique, else prefixed with the split."""
    ids = [q.id for questions in source.splits.values() for q in questions]
    prefix = len(set(ids)) != len(ids)
    return {
        split: [
            TaskSpec(
                task_id=f"{split}/{q.id}" if prefix else q.id,
                split=split,
                index=index,
                family=q.data_source,
                description=q.question,
            )
            for index, q in enumerate(questions)
        ]
        for split, questions in source.splits.items()
    }


class SearchQAKind(EnvironmentKind):
    """Multi-turn search-and-answer over a BM25 index or a remote Search-R1 retriever."""

    name = "searchqa"
    description = (
        "Search-QA (Search-R1 protocol): <search> query </search> returns passages in <information>, "
        "<answer> text </answer> ends the episode; exact-match reward; 4 turns by default"
    )
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = DEFAULT_MAX_TURNS

    config_keys: Mapping[str, str] = {
        "data": "folder of question files (<split>.jsonl or <split>.parquet, Search-R1's format) and, unless "
        f"index or retriever is set, their BM25 index; default: ${DATA_ENV}, else the generated data set",
        "index": f"folder of the BM25 index (`envhub retriever build`) when it is not data's; default: ${INDEX_ENV}",
        "retriever": "URL of a Search-R1 retrieval server searched instead of an index (http://host:port); "
        f"default: ${RETRIEVER_ENV}",
        "topk": f"passages a search returns when the session sets no topk option, 1 to {MAX_TOPK} "
        f"(default {DEFAULT_TOPK}, as in Search-R1)",
        "max_turns": f"turn limit of a session that sets no max_steps, at least 1 (default {DEFAULT_MAX_TURNS}, "
        "BranchOPD's Search-QA setting; Search-R1's script uses 2)",
    }

    def __init__(
        self,
        data: str | Path | None = None,
        *,
        index: str | Path | None = None,
        retriever_url: str = "",
        topk: int = DEFAULT_TOPK,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        self.source = load_source(data, index, retriever_url)
        self.version = f"envhub-searchqa{ENV_VERSION}/bm25s-{package_version('bm25s')}/data-{self.source.digest}"
        self.topk = topk
        """Passages per search of a session without the `topk` option."""
        self.default_max_steps = max_turns
        self.options: Mapping[str, str] = {
            "topk": f"passages returned per search, 1 to {MAX_TOPK} (default {topk}: setting searchqa.topk)",
        }
        self._specs = _task_specs(self.source)
        self._by_id = {spec.task_id: spec for specs in self._specs.values() for spec in specs}
        self._questions = {spec.task_id: self.source.splits[spec.split][spec.index] for spec in self._by_id.values()}
        self._retriever: Retriever | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SearchQAKind:
        """From `envhub serve --env searchqa --set searchqa.topk=5` (keys: `config_keys`)."""
        cls.check_config_keys(config)
        folders = {key: str(config[key]) for key in ("data", "index") if config.get(key)}
        for key, folder in folders.items():
            if not Path(folder).is_dir():
                raise ValueError(f"searchqa.{key}={folder!r} is not a folder")
        url = str(config.get("retriever") or "")
        if url and not url.startswith(("http://", "https://")):
            raise ValueError(f"searchqa.retriever={url!r} must be an http:// or https:// URL")
        topk = whole_number("searchqa.topk", config.get("topk", DEFAULT_TOPK), least=1, most=MAX_TOPK)
        max_turns = whole_number("searchqa.max_turns", config.get("max_turns", DEFAULT_MAX_TURNS), least=1)
        try:
            return cls(
                folders.get("data"), index=folders.get("index"), retriever_url=url, topk=topk, max_turns=max_turns
            )
        except FileNotFoundError as exc:
            raise ValueError(f"searchqa: {exc}") from exc

    def config(self) -> Mapping[str, str]:
        where = {"retriever": self.source.retriever_url} if self.source.retriever_url else {}
        if self.source.index is not None and self.source.index != self.source.folder:
            where = {"index": str(self.source.index)}
        return {
            "data": str(self.source.folder),
            **where,
            "topk": str(self.topk),
            "max_turns": str(self.default_max_steps),
        }

    @property
    def retriever(self) -> Retriever:
        """The process's retriever, opened on first use."""
        if self._retriever is None:
            if self.source.retriever_url:
                self._retriever = RemoteRetriever(self.source.retriever_url)
            else:
                assert self.source.index is not None
                self._retriever = open_index(self.source.index)
        return self._retriever

    def splits(self) -> list[str]:
        return list(self._specs)

    def tasks(self, split: str) -> Sequence[TaskSpec]:
        if split not in self._specs:
            raise errors.not_found(
                f"unknown split {split!r}; known splits: {', '.join(self._specs)}", "UNKNOWN_SPLIT", split=split
            )
        return self._specs[split]

    def task(self, task_id: str) -> TaskSpec:
        return self._by_id[task_id]

    def validate_options(self, options: Mapping[str, str]) -> None:
        super().validate_options(options)
        topk_option(options, self.topk)

    def create(self) -> Environment:
        return SearchQAEnv(self._questions, self.retriever, self.topk)
