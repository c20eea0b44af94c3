"""`SearchQAKind`: Search-R1 style question answering as an envhub environment kind.

One kind object per worker process holds the questions and one retriever (the memory-mapped
BM25 index, or a client of a remote retrieval server) shared by every session of the process.
Where the data comes from is described in `envhub.envs.searchqa.data`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import version as package_version
from pathlib import Path

from envhub.core import errors
from envhub.core.environment import Capabilities, Environment, EnvironmentKind, TaskSpec
from envhub.envs.searchqa.data import DataSource, load_source
from envhub.envs.searchqa.env import DEFAULT_TOPK, MAX_TOPK, SearchQAEnv, topk_option
from envhub.envs.searchqa.remote import RemoteRetriever
from envhub.envs.searchqa.retriever import Retriever, open_index

ENV_VERSION = "1"
"""Version of this environment's behaviour (observations, rewards, native snapshot layout)."""


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
        "<answer> text </answer> ends the episode; exact-match reward; 4 turns"
    )
    capabilities = Capabilities(native_snapshot=True, deterministic_replay=True, expert=True, admissible_actions=True)
    default_max_steps = 4
    options: Mapping[str, str] = {
        "topk": f"passages returned per search, 1 to {MAX_TOPK} (default {DEFAULT_TOPK}, as in Search-R1)",
    }

    def __init__(
        self, data: str | Path | None = None, *, index: str | Path | None = None, retriever_url: str = ""
    ) -> None:
        self.source = load_source(data, index, retriever_url)
        self.version = f"envhub-searchqa{ENV_VERSION}/bm25s-{package_version('bm25s')}/data-{self.source.digest}"
        self._specs = _task_specs(self.source)
        self._by_id = {spec.task_id: spec for specs in self._specs.values() for spec in specs}
        self._questions = {spec.task_id: self.source.splits[spec.split][spec.index] for spec in self._by_id.values()}
        self._retriever: Retriever | None = None

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
        topk_option(options)

    def create(self) -> Environment:
        return SearchQAEnv(self._questions, self.retriever)
