"""`trainer compare`'s learning-rate search: every arm tries the same values for the same short run and seeds;
the value with the best held-out success goes into that arm's long runs."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

SEARCH_RECORD = "lr-search.json"


class Curve(Protocol):
    """What the search reads of a run: its held-out success after each evaluated step (index 0: the start)."""

    @property
    def success(self) -> list[float]: ...


@dataclass(frozen=True)
class SearchResult:
    """One arm's search: each value's score and final success (means over the search seeds) and the choice."""

    arm: str
    scores: dict[float, float]
    """Learning rate -> held-out success averaged over the search run's evaluations (not its start), then seeds."""
    finals: dict[float, float]
    """Learning rate -> held-out success after the search run's last step, mean over seeds."""
    seeds: int
    """Search seeds every value was run with."""

    @property
    def chosen(self) -> float:
        """The value the long runs use."""
        return best_lr(self.scores)


def selection_score(runs: Sequence[Curve]) -> float:
    """Mean over runs of the mean held-out success over each run's evaluated steps (the start excluded): the area
    under the short run's curve, less noisy than its last point alone."""
    return statistics.fmean(statistics.fmean(run.success[1:]) for run in runs)


def best_lr(scores: Mapping[float, float]) -> float:
    """The learning rate with the highest score; a tie (within 1e-9) goes to the smaller learning rate."""
    if not scores:
        raise ValueError("no learning rate was searched")
    return min(scores, key=lambda lr: (-round(scores[lr], 9), lr))


def search_result(arm: str, runs_by_lr: Mapping[float, Sequence[Curve]]) -> SearchResult:
    """The search of `arm` from its runs at each learning rate (every value with the same seeds)."""
    seeds = {len(runs) for runs in runs_by_lr.values()}
    if len(seeds) != 1 or 0 in seeds:
        raise ValueError(f"{arm}: every learning rate needs the same number of search runs, got {sorted(seeds)}")
    return SearchResult(
        arm=arm,
        scores={lr: selection_score(runs) for lr, runs in runs_by_lr.items()},
        finals={lr: statistics.fmean(run.success[-1] for run in runs) for lr, runs in runs_by_lr.items()},
        seeds=seeds.pop(),
    )


def search_table(results: Sequence[SearchResult]) -> str:
    """Markdown: one row per arm, one column per learning rate (score, final), the chosen value in bold."""
    if not results:
        return ""
    values = sorted({lr for result in results for lr in result.scores})
    head = " | ".join(f"lr {lr:g}" for lr in values)
    lines = [f"| arm | {head} | chosen |", "|---" * (len(values) + 2) + "|"]
    for result in results:
        cells = []
        for lr in values:
            if lr not in result.scores:
                cells.append("not run")
                continue
            cell = f"{result.scores[lr]:.3f} (final {result.finals[lr]:.2f})"
            cells.append(f"**{cell}**" if lr == result.chosen else cell)
        lines.append(f"| {result.arm} | {' | '.join(cells)} | {result.chosen:g} |")
    return "\n".join(lines)
