"""`StepBatcher`: many concurrent episodes' single steps coalesced into batched envhub rounds.

Hosts that run each episode as its own coroutine (verifiers environments, verl agent loops)
step one episode at a time; `await batcher.step(session_id, action)` instead parks the step.
One round is in flight at a time: the steps parked in the same event-loop pass go together,
and every step parked while a round is in flight goes in the next one, as one `step_many`
(one StepBatch call per replica). Each caller gets its own turn, or its own step's error.
"""

from __future__ import annotations

import asyncio

from envhub.client import EnvView, SessionPort


class StepBatcher:
    """Coalesces concurrent `step` calls on one event loop into `SessionPort.step_each` rounds."""

    def __init__(self, episodes: SessionPort) -> None:
        self.episodes = episodes
        self._pending: list[tuple[str, str, asyncio.Future[EnvView]]] = []
        self._sender: asyncio.Task[None] | None = None
        self.rounds = 0
        """How many rounds were sent (a measure of the batching: steps / rounds)."""

    async def step(self, session_id: str, action: str) -> EnvView:
        future: asyncio.Future[EnvView] = asyncio.get_running_loop().create_future()
        self._pending.append((session_id, action, future))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        return await future

    async def _send(self) -> None:
        try:
            await asyncio.sleep(0)  # one loop pass: every episode that is ready joins the first round
            while self._pending:
                batch, self._pending = self._pending, []
                await self._round(batch)
                await asyncio.sleep(0)  # the episodes just answered park their next steps
        finally:
            self._sender = None

    async def _round(self, batch: list[tuple[str, str, asyncio.Future[EnvView]]]) -> None:
        self.rounds += 1
        outcomes: list[EnvView | BaseException]
        try:
            outcomes = list(await asyncio.to_thread(self.episodes.step_each, [(s, a) for s, a, _ in batch]))
        except Exception as exc:  # the round itself failed (e.g. no connection): every step learns why
            outcomes = [exc] * len(batch)
        for (_, _, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
