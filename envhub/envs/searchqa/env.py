"""`SearchQAEnv`: one question answered in Search-R1 turns.

A turn is `<search> query </search>` (the top `topk` passages come back in
`<information>...</information>`; `topk` is the session's option, else the server's
`searchqa.topk`) or `<answer> text </answer>` (the episode ends; the reward is exact match
after SQuAD normalisation against any accepted answer, F1 in the info). Anything else, or an
empty query, is an invalid turn: it counts against the turn limit (the session's max_steps, by
default the server's `searchqa.max_turns`, 4) and the observation says how to act.

The state is the interaction history as plain data (each turn's kind, text and retrieved
passage ids), so native snapshots restore without replaying or searching again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envhub.core import errors
from envhub.core.environment import Environment, Observation, StepResult, TaskSpec
from envhub.envs.searchqa.corpus import Question
from envhub.envs.searchqa.protocol import (
    EMPTY_QUERY_OBSERVATION,
    INVALID_OBSERVATION,
    exact_match,
    f1_score,
    format_information,
    parse_action,
)
from envhub.envs.searchqa.retriever import Retriever

NATIVE_FORMAT = 1
DEFAULT_TOPK = 3
MAX_TOPK = 20
ANSWER_ECHO_CHARS = 200


def topk_option(options: Mapping[str, str], default: int = DEFAULT_TOPK) -> int:
    """The `topk` option as an int (`default` when absent); ValueError names the bad value."""
    raw = options.get("topk", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_TOPK:
        raise ValueError(f"option topk={raw!r} must be an integer from 1 to {MAX_TOPK}")
    return int(raw)


@dataclass(frozen=True)
class SearchTurn:
    """One turn of the history: "search", "answer" or "invalid", its text, the passage ids found."""

    kind: str
    text: str
    ids: tuple[str, ...] = ()


class SearchQAEnv(Environment):
    """Plays questions from `questions` (task id -> question) with a shared retriever.

    A search returns `topk` passages: the session's `topk` option, else `default_topk`.
    """

    def __init__(
        self, questions: Mapping[str, Question], retriever: Retriever, default_topk: int = DEFAULT_TOPK
    ) -> None:
        self._questions = questions
        self._retriever = retriever
        self._question: Question | None = None
        self._task_id = ""
        self._default_topk = default_topk
        self._topk = default_topk
        self._turns: list[SearchTurn] = []
        self._score = 0.0

    def _live(self) -> Question:
        if self._question is None:
            raise errors.failed_precondition("the Search-QA environment has not been reset", "NOT_RESET")
        return self._question

    def _start(self, task: TaskSpec, options: Mapping[str, str]) -> Question:
        try:
            self._topk = topk_option(options, self._default_topk)
        except ValueError as exc:
            raise errors.invalid_argument(str(exc), "BAD_OPTION") from exc
        question = self._questions.get(task.task_id)
        if question is None:
            raise errors.not_found(f"no Search-QA question {task.task_id!r}", "UNKNOWN_TASK")
        self._question, self._task_id, self._turns, self._score = question, task.task_id, [], 0.0
        return question

    def _observation(self, text: str, **info: Any) -> Observation:
        question = self._live()
        searches = sum(turn.kind == "search" for turn in self._turns)
        info = {"turn": len(self._turns), "searches": searches, "data_source": question.data_source, **info}
        return Observation(text=text, task_description=question.question, score=self._score, info=info)

    def reset(self, task: TaskSpec, *, seed: int, options: Mapping[str, str]) -> Observation:
        question = self._start(task, options)
        return self._observation(question.question)

    def step(self, action: str) -> StepResult:
        question = self._live()
        parsed = parse_action(action)
        if parsed is None or (parsed.kind == "search" and not parsed.text):
            self._turns.append(SearchTurn("invalid", action[:ANSWER_ECHO_CHARS]))
            text = INVALID_OBSERVATION if parsed is None else EMPTY_QUERY_OBSERVATION
            return StepResult(self._observation(text, valid=False), 0.0, terminated=False)
        if parsed.kind == "search":
            hits = self._retriever.search([parsed.text], self._topk)[0]  # may raise UNAVAILABLE: no turn is taken
            self._turns.append(SearchTurn("search", parsed.text, tuple(hit.id for hit in hits)))
            observation = self._observation(format_information([hit.contents for hit in hits]), valid=True)
            return StepResult(observation, 0.0, terminated=False)
        won = exact_match(parsed.text, question.golden_answers)
        f1 = f1_score(parsed.text, question.golden_answers)
        self._turns.append(SearchTurn("answer", parsed.text))
        self._score = 1.0 if won else 0.0
        echo = parsed.text[:ANSWER_ECHO_CHARS]
        observation = self._observation(f"Your answer: {echo}", valid=True, em=float(won), f1=f1)
        return StepResult(observation, self._score, terminated=True, won=won)

    def admissible_actions(self) -> list[str]:
        """The two action forms, as templates (the actions themselves are free text)."""
        self._live()
        return ["<search> query </search>", "<answer> text </answer>"]

    def expert_actions(self) -> list[str]:
        """The gold searches not yet made (counted by valid searches so far), then the answer."""
        question = self._live()
        if self._turns and self._turns[-1].kind == "answer":
            return []
        done = sum(turn.kind == "search" for turn in self._turns)
        searches = [f"<search>{query}</search>" for query in question.gold_searches[done:]]
        return [*searches, f"<answer>{question.golden_answers[0]}</answer>"]

    def native_state(self) -> str:
        self._live()
        turns = [[turn.kind, turn.text, list(turn.ids)] for turn in self._turns]
        state = {"format": NATIVE_FORMAT, "task_id": self._task_id, "turns": turns, "score": self._score}
        return json.dumps(state, separators=(",", ":"), ensure_ascii=False)

    def load_native_state(
        self, task: TaskSpec, *, seed: int, options: Mapping[str, str], state: str, observation: Observation
    ) -> None:
        self._start(task, options)
        try:
            data = json.loads(state)
            if data["format"] != NATIVE_FORMAT or data["task_id"] != task.task_id:
                raise ValueError(f"format {data['format']} for task {data['task_id']!r}")
            turns = [SearchTurn(str(kind), str(text), tuple(map(str, ids))) for kind, text, ids in data["turns"]]
            score = float(data["score"])
        except (KeyError, TypeError, ValueError) as exc:
            raise errors.invalid_argument(f"unusable Search-QA native state: {exc!r}", "BAD_NATIVE_STATE") from exc
        self._turns, self._score = turns, score
