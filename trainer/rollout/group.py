"""`GroupRollout`: G trajectories per task from identical states, all sessions advanced in lock-step.

Every turn, the prompts of all active sessions are generated as ONE batch, then their actions are
sent concurrently (a thread pool over the synchronous client). A step that fails or passes its
deadline is retried from the snapshot taken at the turn start (when snapshots are on) and
otherwise the trajectory is dropped with a counted reason; the other sessions carry on.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from envhub.client import EnvhubError, EnvView, SessionPort, StatusCode
from trainer.backends.base import Generation, GenerationBackend, SamplingSettings
from trainer.prompts import PastStep, PromptRenderer, PromptState, encode_follow_up, encode_user_turn
from trainer.rollout.matching import CONSTRAIN, ActionMatch, AdmissibleReplies, match_action
from trainer.rollout.takeover import ProgressTracker, Recovery
from trainer.rollout.types import Trajectory, Turn

T = TypeVar("T")
R = TypeVar("R")


TruncationPolicy = Literal["invalid", "mask"]
TRUNCATION_POLICIES: tuple[str, ...] = ("invalid", "mask")
PROMPT_TAIL_SHARE = 3
"""When even a history-free prompt is too long, its middle is cut: the last 1/3 of the budget keeps
the template's closing instructions and the assistant header, the rest keeps its head."""


@dataclass(frozen=True)
class TurnProgress:
    """How far a lock-step rollout got after one turn (for progress bars)."""

    turn: int
    """Turns played so far (1 after the first)."""
    finished: int
    """Episodes that ended (done or dropped)."""
    episodes: int
    """Episodes in the rollout."""


TurnCallback = Callable[[TurnProgress], None]


@dataclass(frozen=True)
class RolloutSettings:
    """Episode settings shared by every trajectory of a rollout."""

    group_size: int = 8
    max_turns: int = 50
    snapshots: bool = False
    step_timeout_s: float = 30.0
    step_retries: int = 1
    concurrency: int = 16
    max_prompt_tokens: int = 1024
    truncation: TruncationPolicy = "invalid"
    """What a response cut at `max_new_tokens` becomes: `invalid` (an invalid action: nothing is sent,
    the turn is trained like any other) or `mask` (parsed as usual, but excluded from the loss)."""
    action_match: ActionMatch = "exact"
    """A parsed action not on the episode's concrete admissible list: sent as written (`exact`), replaced by the
    most similar listed action (`nearest`), or never generated (`constrained`, `choice`; rollout/matching.py)."""
    reply_space: bool = False
    """`prompt.reply_space`: how the replies `constrained` and `choice` allow are written (`action_text`'s `spaced`)."""


@dataclass
class RolloutStats:
    """Counters of one rollout call."""

    turns: int = 0
    invalid_turns: int = 0
    truncated_turns: int = 0
    """Responses cut at `max_new_tokens` (finish reason "length")."""
    matched_turns: int = 0
    """Turns whose parsed action was off the admissible list and replaced by the nearest listed one."""
    trimmed_prompts: int = 0
    """Prompts over `max_prompt_tokens` that lost history steps (or, as a last resort, their middle)."""
    generated_tokens: int = 0
    retries: int = 0
    takeovers: int = 0
    """Teacher takeovers started (DivOPD +R)."""
    teacher_turns: int = 0
    """Turns the teacher played during takeovers."""
    rewinds: int = 0
    """Takeovers that first restored the last progressing turn's snapshot."""
    dropped: Counter[str] = field(default_factory=Counter)
    forks: int = 0
    """Sessions put back into a recorded state to play continuations from (restores plus ForkSession calls)."""
    fork_s: float = 0.0
    """Seconds those restores and forks took (summed over the calls, which run side by side)."""
    generate_s: float = 0.0
    step_s: float = 0.0
    wall_s: float = 0.0
    PARALLEL: ClassVar[frozenset[str]] = frozenset({"wall_s"})
    """Fields of calls that run side by side: `merge` keeps their longest, and sums every other field."""

    def merge(self, other: RolloutStats) -> None:
        """Add the counters of `other`, a call made side by side with this one (every field is merged)."""
        for item in dataclasses.fields(self):
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif item.name in self.PARALLEL:
                setattr(self, item.name, max(mine, theirs))
            else:
                setattr(self, item.name, mine + theirs)

    def as_metrics(self) -> dict[str, float]:
        """Flat metrics for logging."""
        out = {
            "rollout/turns": float(self.turns),
            "rollout/invalid_turn_ratio": self.invalid_turns / max(self.turns, 1),
            "rollout/truncated_turn_ratio": self.truncated_turns / max(self.turns, 1),
            "rollout/matched_turn_ratio": self.matched_turns / max(self.turns, 1),
            "rollout/trimmed_prompt_ratio": self.trimmed_prompts / max(self.turns, 1),
            "rollout/generated_tokens": float(self.generated_tokens),
            "rollout/retries": float(self.retries),
            "takeover/count": float(self.takeovers),
            "takeover/turns": float(self.teacher_turns),
            "takeover/rewinds": float(self.rewinds),
            "rollout/dropped": float(sum(self.dropped.values())),
            "rollout/forks": float(self.forks),
            "rollout/fork_s": self.fork_s,
            "rollout/generate_s": self.generate_s,
            "rollout/step_s": self.step_s,
            "rollout/wall_s": self.wall_s,
            "rollout/turns_per_s": self.turns / max(self.wall_s, 1e-9),
        }
        out.update({f"rollout/dropped/{reason}": float(n) for reason, n in self.dropped.items()})
        return out


@dataclass(frozen=True)
class Resume:
    """Continue an episode's next turn from a recorded prompt and a response prefix (a BranchOPD fork)."""

    prompt_ids: list[int]
    prefix_ids: list[int]
    """Response tokens kept before the fork (plus a forced token, if any): the backend continues after them."""
    prefix_logp: list[float]
    prefix_top: list[list[tuple[int, float]]] | None
    supervise_from: int
    """Offset of the first supervised response token (the fork, or after a forced token)."""


@dataclass
class Episode:
    """One session being played: its trajectory so far and what the next prompt is rendered from."""

    trajectory: Trajectory
    view: EnvView
    task_description: str
    past: list[PastStep] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    """Full-mode token context (prompt + responses so far)."""
    snapshot: bytes | None = None
    tracker: ProgressTracker | None = None
    """No-progress detector and takeover state (only with recovery)."""
    resume: Resume | None = None
    """When set, the next turn continues this prefix instead of rendering a prompt."""
    prompt_text: str = ""
    """The user message last rendered for this episode (`Turn.prompt_text`)."""

    @property
    def active(self) -> bool:
        return not self.trajectory.dropped and not self.trajectory.done


class GroupRollout:
    """Rollout strategy: G sessions per task forked from one, stepped in lock-step batches."""

    def __init__(
        self,
        port: SessionPort,
        backend: GenerationBackend,
        tokenizer: Any,
        renderer: PromptRenderer,
        settings: RolloutSettings,
        recovery: Recovery | None = None,
    ) -> None:
        self.port = port
        self.recovery = recovery
        self.backend = backend
        self.tokenizer = tokenizer
        self.renderer = renderer
        self.settings = settings
        self._replies = (
            AdmissibleReplies(tokenizer, renderer.format.parse, settings.reply_space)
            if settings.action_match in CONSTRAIN
            else None
        )
        self._pool = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="rollout")

    def close(self) -> None:
        """Stop the step thread pool."""
        self._pool.shutdown(wait=True)

    def run(
        self,
        tasks: Sequence[tuple[str, int]],
        sampling: SamplingSettings,
        group_size: int | None = None,
        on_turn: TurnCallback | None = None,
    ) -> tuple[list[Trajectory], RolloutStats]:
        """Play `group_size` episodes of each (task_id, seed); trajectories come back in group order."""
        stats = RolloutStats()
        start = time.perf_counter()
        size = group_size or self.settings.group_size
        groups = self.map(lambda item: self._start_group(item[0], *item[1], size), list(enumerate(tasks)))
        episodes = [episode for group in groups for episode in group]
        self.play(episodes, sampling, stats, on_turn)
        stats.wall_s = time.perf_counter() - start
        return [e.trajectory for e in episodes], stats

    def play(
        self,
        episodes: Sequence[Episode],
        sampling: SamplingSettings,
        stats: RolloutStats,
        on_turn: TurnCallback | None = None,
    ) -> None:
        """Advance `episodes` in lock-step until each is done or dropped, then close their sessions;
        `on_turn` hears after every turn how far the episodes got."""
        try:
            turn = 0
            while active := [e for e in episodes if e.active]:
                seed = None if sampling.seed is None else sampling.seed + turn
                self._turn(active, sampling, seed, stats)
                turn += 1
                if on_turn is not None:
                    on_turn(TurnProgress(turn, sum(not e.active for e in episodes), len(episodes)))
        finally:
            self.map(lambda e: self._close(e.view.session_id), episodes)

    # ------------------------------------------------------------------ one turn

    def _turn(self, active: list[Episode], sampling: SamplingSettings, seed: int | None, stats: RolloutStats) -> None:
        for episode in active:
            self._maybe_take_over(episode, stats)
        if self.settings.snapshots:
            snapshots = self.map(lambda e: self.port.snapshot(e.view.session_id), active)
            for episode, snapshot in zip(active, snapshots, strict=True):
                episode.snapshot = snapshot
        prompts = [e.resume.prompt_ids if e.resume else self._prompt_ids(e, stats) for e in active]
        t0 = time.perf_counter()
        by_teacher = [e.tracker is not None and e.tracker.teacher_acting for e in active]
        allowed = self._allowed(active)
        generated = self._generate(
            [p + e.resume.prefix_ids if e.resume else p for p, e in zip(prompts, active, strict=True)],
            by_teacher,
            dataclasses.replace(sampling, seed=seed, constrain=CONSTRAIN.get(self.settings.action_match, "tokens")),
            allowed,
        )
        drawn_from = allowed if self.settings.action_match == "choice" else None
        stats.generate_s += time.perf_counter() - t0
        stats.generated_tokens += sum(len(g.token_ids) for g in generated)
        generations = [_after_prefix(e.resume, g) for e, g in zip(active, generated, strict=True)]
        texts = [self.tokenizer.decode(g.token_ids, skip_special_tokens=True) for g in generations]
        parsed = [self._action(g, t) for g, t in zip(generations, texts, strict=True)]
        actions = [
            match_action(action, e.view.admissible or (), self.settings.action_match)
            for e, action in zip(active, parsed, strict=True)
        ]
        t0 = time.perf_counter()
        outcomes = self._step_all(active, actions, stats)
        stats.step_s += time.perf_counter() - t0
        for index, (episode, prompt, generation, text, action, written, outcome, teacher) in enumerate(
            zip(active, prompts, generations, texts, actions, parsed, outcomes, by_teacher, strict=True)
        ):
            stats.turns += 1
            stats.teacher_turns += teacher
            stats.invalid_turns += action is None
            stats.matched_turns += action != written
            stats.truncated_turns += generation.finish_reason == "length"
            if isinstance(outcome, str):
                episode.trajectory.dropped = outcome
                stats.dropped[outcome] += 1
                continue
            listed = None if drawn_from is None or episode.resume else drawn_from[index]
            self._record(episode, prompt, generation, text, action, outcome, teacher, written, listed)

    def _allowed(self, active: list[Episode]) -> list[list[list[int]] | None] | None:
        """Under `constrained` or `choice`, per episode the replies it may generate (after a resumed prefix); None:
        all free."""
        if self._replies is None:
            return None
        replies = self._replies
        return [replies.allowed(e.view.admissible or (), e.resume.prefix_ids if e.resume else ()) for e in active]

    def _generate(
        self,
        prompts: list[list[int]],
        by_teacher: list[bool],
        sampling: SamplingSettings,
        allowed: list[list[list[int]] | None] | None = None,
    ) -> list[Generation]:
        """One batched call per acting model: the student's, and the teacher's for sessions it took over."""
        if not any(by_teacher) or self.recovery is None:
            return _generate_with(self.backend, prompts, sampling, allowed)
        out: list[Generation | None] = [None] * len(prompts)
        for backend, flag in ((self.backend, False), (self.recovery.teacher, True)):
            index = [i for i, teacher in enumerate(by_teacher) if teacher == flag]
            if index:
                part = None if allowed is None else [allowed[i] for i in index]
                made = _generate_with(backend, [prompts[i] for i in index], sampling, part)
                for i, generation in zip(index, made, strict=True):
                    out[i] = generation
        return [g for g in out if g is not None]

    def _maybe_take_over(self, episode: Episode, stats: RolloutStats) -> None:
        """Start a takeover if the student stalled; with rewind, restore the last progressing state first."""
        if episode.tracker is None or self.recovery is None:
            return
        start = episode.tracker.start_takeover()
        if start is None:
            return
        stats.takeovers += 1
        snapshot = episode.trajectory.turns[start].snapshot
        if not self.recovery.settings.rewind or snapshot is None:
            return
        self._close(episode.view.session_id)
        episode.view = self.port.restore(snapshot)
        episode.past = episode.past[:start]
        stats.rewinds += 1

    def _action(self, generation: Generation, text: str) -> str | None:
        """The parsed action, or None (invalid): unparsable, or cut at `max_new_tokens` under `invalid`."""
        if generation.finish_reason == "length" and self.settings.truncation == "invalid":
            return None
        return self.renderer.format.parse(text)

    def _record(
        self,
        episode: Episode,
        prompt: list[int],
        generation: Generation,
        text: str,
        action: str | None,
        view: EnvView,
        teacher: bool = False,
        written: str | None = None,
        listed: list[list[int]] | None = None,
    ) -> None:
        """Append the turn (`action` as sent; `written`, the reply's own parsed action, kept when matching replaced
        it; `listed`, the replies it was drawn among under `choice`) and advance the episode to `view`."""
        trajectory = episode.trajectory
        limit = len(trajectory.turns) + 1 >= self.settings.max_turns
        trajectory.turns.append(
            Turn(
                prompt_ids=prompt,
                response_ids=list(generation.token_ids),
                logp_old=list(generation.logprobs),
                response_text=text,
                action=action,
                matched_from=written if written != action else None,
                observation=view.text,
                reward=view.reward,
                score=view.score,
                done=view.terminated or view.truncated or view.won or limit,
                admissible=list(episode.view.admissible or ()),
                snapshot=episode.snapshot,
                top_logprobs=generation.top_logprobs,
                finish_reason=generation.finish_reason,
                masked=generation.finish_reason == "length" and self.settings.truncation == "mask",
                teacher=teacher,
                supervise_from=episode.resume.supervise_from if episode.resume else 0,
                prompt_text="" if episode.resume else episode.prompt_text,
                listed=listed,
                listed_logp=generation.listed_logprobs if listed is not None else None,
            )
        )
        if episode.tracker is not None:
            episode.tracker.record(
                len(trajectory.turns) - 1, action, view.text, episode.view.admissible or (), teacher=teacher
            )
        episode.resume = None
        trajectory.won = trajectory.won or view.won
        episode.past.append(PastStep(observation=episode.view.text, action=action or shorten(text)))
        if self.renderer.context == "full":
            episode.context = prompt + list(generation.token_ids)
        episode.view = view

    def _prompt_ids(self, episode: Episode, stats: RolloutStats) -> list[int]:
        """The turn's prompt. `full` mode: the whole context so far plus the follow-up user turn (chat template
        applied once, no repeated system prompt; never cut: `env.max_turns` bounds it). `history` mode: within
        `max_prompt_tokens` by showing fewer history steps; the task and instructions are never cut (the last
        resort cuts the middle: observation, admissible list)."""
        state = PromptState(
            task_description=episode.task_description,
            observation=episode.view.text,
            admissible=episode.view.admissible or (),
            past=episode.past,
        )
        if self.renderer.context == "full":
            text = episode.prompt_text = self.renderer.render(state)
            if not episode.context:
                return encode_user_turn(self.tokenizer, text)
            closed = episode.context[-1] == self.tokenizer.eos_token_id
            return episode.context + encode_follow_up(self.tokenizer, text, closed)
        limit = self.settings.max_prompt_tokens
        shown = min(len(episode.past), self.renderer.history_length)
        for history in range(shown, -1, -1):
            episode.prompt_text = self.renderer.render(state, history=history)
            ids = encode_user_turn(self.tokenizer, episode.prompt_text)
            if len(ids) <= limit:
                stats.trimmed_prompts += history < shown
                return ids
        stats.trimmed_prompts += 1
        tail = limit // PROMPT_TAIL_SHARE
        return ids[: limit - tail] + ids[len(ids) - tail :]

    def _step_all(self, active: list[Episode], actions: list[str | None], stats: RolloutStats) -> list[EnvView | str]:
        """Each episode's new view, or the reason its trajectory is dropped: every parsed action in
        one batched step (`SessionPort.step_each`); a failed step retried on its own (`_retry`)."""
        outcomes: list[EnvView | str] = [self._invalid(episode) for episode in active]
        moving = [index for index, action in enumerate(actions) if action is not None]
        answers = self.port.step_each(
            [(active[index].view.session_id, actions[index] or "") for index in moving],
            timeout=self.settings.step_timeout_s,
        )
        failed: list[tuple[int, EnvhubError]] = []
        for index, answer in zip(moving, answers, strict=True):
            if isinstance(answer, EnvhubError):
                failed.append((index, answer))
            else:
                outcomes[index] = answer
        retried = self.map(lambda item: self._retry(active[item[0]], actions[item[0]] or "", item[1], stats), failed)
        for (index, _), outcome in zip(failed, retried, strict=True):
            outcomes[index] = outcome
        return outcomes

    def _invalid(self, episode: Episode) -> EnvView:
        """What an episode sees after an invalid (unparsed) action: the env is not stepped."""
        return EnvView(
            session_id=episode.view.session_id,
            text=self.renderer.format.invalid_observation,
            task_description=episode.view.task_description,
            admissible=episode.view.admissible,
            score=episode.view.score,
        )

    def _retry(self, episode: Episode, action: str, error: EnvhubError, stats: RolloutStats) -> EnvView | str:
        """After a failed step: restore the turn's snapshot and step again, up to `step_retries` times
        (with snapshots on); the new view, or the reason the trajectory is dropped."""
        reason = error.reason
        snapshot = episode.snapshot
        for _ in range(self.settings.step_retries if snapshot is not None else 0):
            try:
                stats.retries += 1
                self._close(episode.view.session_id)
                restored = self.port.restore(snapshot)  # type: ignore[arg-type]
                episode.view = dataclasses.replace(restored, admissible=episode.view.admissible)
                return self.port.step(episode.view.session_id, action, timeout=self.settings.step_timeout_s)
            except EnvhubError as exc:
                reason = exc.reason
        return reason or "STEP_FAILED"

    # ------------------------------------------------------------------ sessions

    def _start_group(self, group: int, task_id: str, seed: int, size: int) -> list[Episode]:
        views = self.port.start_group(task_id, size=size, seed=seed, max_steps=self.settings.max_turns)
        return [
            Episode(
                trajectory=Trajectory(task_id=task_id, group=group, seed=seed, initial_observation=view.text),
                view=view,
                task_description=view.task_description,
                tracker=ProgressTracker(self.recovery.settings) if self.recovery else None,
            )
            for view in views
        ]

    def _close(self, session_id: str) -> None:
        try:
            self.port.end(session_id)
        except EnvhubError as exc:
            if exc.code != StatusCode.NOT_FOUND:
                raise

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` over `items` on the rollout's thread pool (session calls run concurrently), results in order."""
        return list(self._pool.map(fn, items))


def _after_prefix(resume: Resume | None, generation: Generation) -> Generation:
    """The whole response of a resumed turn: the kept prefix followed by what was generated after it."""
    if resume is None:
        return generation
    top = None
    if resume.prefix_top is not None and generation.top_logprobs is not None:
        top = resume.prefix_top + generation.top_logprobs
    return Generation(
        resume.prefix_ids + list(generation.token_ids),
        resume.prefix_logp + list(generation.logprobs),
        top,
        generation.finish_reason,
    )


def shorten(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters (an invalid turn's text in the history)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _generate_with(
    backend: GenerationBackend,
    prompts: list[list[int]],
    sampling: SamplingSettings,
    allowed: list[list[list[int]] | None] | None,
) -> list[Generation]:
    """`backend.generate`, limited to `allowed` when some prompt has a constraint (else called without it)."""
    if allowed is None or all(a is None for a in allowed):
        return list(backend.generate(prompts, sampling))
    return list(backend.generate(prompts, sampling, allowed))
