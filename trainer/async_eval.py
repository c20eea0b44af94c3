"""Held-out evaluation on the asynchronous path, beside the producers and the learner.

A rollout worker of its own (the `group` strategy: no takeover, no branching, as `trainer eval`) loads the
weights the learner held after update s and plays the same held-out protocol as the synchronous driver
(`trainer.held_out.play_held_out`: every held-out split, fixed seeds, `eval.temperature`) in a thread of its
own, so neither the producers nor the learner wait for it. Results come back tagged with s and are logged as
records of step s (`metrics.jsonl` then holds them after later steps' records; readers order by step).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.config import TrainerConfig
from trainer.episodes_html import write_sample_episodes
from trainer.held_out import play_held_out
from trainer.models.loading import load_tokenizer
from trainer.rollout import SamplingSettings, Trajectory
from trainer.workers import RolloutWorker
from trainer.workers.executor import Executor, Pending

Score = Callable[[list[Trajectory]], tuple[list[Trajectory], int]]


class AsyncEvaluator:
    """Evaluates requested (step, weights) pairs in order on a thread and worker of its own."""

    def __init__(
        self,
        config: TrainerConfig,
        executor: Executor,
        target: str,
        tasks: Mapping[str, Sequence[str]],
        out: Path,
        score: Score | None = None,
    ) -> None:
        plain = config.model_copy(deep=True)
        plain.rollout.strategy = "group"
        self.config, self.executor, self.tasks, self.out, self.score = plain, executor, tasks, out, score
        self.worker = executor.spawn(None, RolloutWorker, plain, target)
        self._requests: queue.Queue[tuple[int, Pending[Any]] | None] = queue.Queue()
        self._results: list[tuple[int, dict[str, float]]] = []
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="held-out-eval", daemon=True)
        self._thread.start()

    def request(self, step: int, weights: Pending[Any]) -> None:
        """Evaluate the policy with `weights` (the learner's after update `step`, as published) when free."""
        self._requests.put((step, weights))

    def _play(self, tasks: list[tuple[str, int]], sampling: SamplingSettings, samples: int) -> Any:
        return self.executor.call(self.worker, RolloutWorker.run, tasks, sampling, samples)

    def _run(self) -> None:
        try:
            while (item := self._requests.get()) is not None:
                step, weights = item
                self.executor.call(self.worker, RolloutWorker.update_weights, weights.as_argument())
                metrics, played = play_held_out(self.config, self._play, self.tasks)
                html = self.out / "episodes" / f"step_{step:06d}.html"
                tokenizer = load_tokenizer(self.config.models.student)
                write_sample_episodes(played, tokenizer, html, f"held-out episodes at step {step}", self.score)
                with self._lock:
                    self._results.append((step, metrics))
        except BaseException as exc:  # handed to the learner thread by `finished`
            self._error = exc

    def finished(self) -> list[tuple[int, dict[str, float]]]:
        """Evaluations done since the last call, as (step, eval/* metrics); re-raises the thread's error."""
        if self._error is not None:
            raise RuntimeError(f"held-out evaluation failed: {self._error!r}") from self._error
        with self._lock:
            done, self._results = self._results, []
        return done

    def close(self, *, wait: bool = True) -> list[tuple[int, dict[str, float]]]:
        """Stop after the requested evaluations (`wait`) or at once; the results not yet taken."""
        if not wait:
            while not self._requests.empty():
                self._requests.get_nowait()
        self._requests.put(None)
        self._thread.join(timeout=None if wait else 0)
        if not self._thread.is_alive():
            self.executor.call(self.worker, RolloutWorker.close)
            self.executor.kill([self.worker])
        return self.finished() if wait else []
