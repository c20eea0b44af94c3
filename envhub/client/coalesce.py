"""`CoalescingTransport`: the independent steps one asyncio process sends in one loop turn, as one StepBatch.

Many producers of one process (one task per session: DivOPD's asynchronous producers, the framework
adapters, one agent per session) each await `client.step(...)` on its own. Through a plain client every
such step is one Step RPC, and a Python gRPC front spends most of its CPU per call, not per step
(docs/design/025-per-call-cost.md). Through this transport the steps sent during one turn of the event
loop are held until the next turn and go as one `StepBatch` (at most `max_batch` steps each, one batch
per distinct timeout; with `depth` over 1, split so that about `depth` batches are in flight at once, which
lets the client, the server's front and its workers work on different batches at the same time instead of
in lock-step); every caller gets its own step's answer or error, as its unary `Step` would:

* **Exactly once**: each step keeps its own `request_id` inside the batch, and the batch is a KEYED
  call, so a batch whose reply was lost is resent whole by the inner transport and every step is still
  applied once (docs/protocol.md, StepBatch).
* **Per-entry errors**: an entry that failed with an error the retry policy would retry for a unary step
  (UNAVAILABLE or DEADLINE_EXCEEDED, not SESSION_LOST or DRAINING) is sent again on its own, as a unary
  Step with the same request_id, through the inner transport's own retries; any other error is raised to
  its caller alone. An error of the whole batch call is raised to each of its callers.
* **Order**: steps of one session keep the order they were sent in (the server applies a batch's steps
  of one session in request order).
* **Cost**: a step's answer waits for the slowest step of its batch (the server answers a batch when
  every worker has), and for one loop turn before it is sent. With environments whose steps vary widely
  in time, plain unary calls or `stream()` answer each step as soon as it is done.

Every other call passes through unchanged. Use it through `AsyncEnvhubClient.coalesced()`:
`async with client.coalesced() as steps: ...` (closing it leaves `client` open).
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.protobuf.message import Message

from envhub.client import calls
from envhub.client.errors import from_status
from envhub.client.retry import DEFAULT_POLICY, RetryPolicy
from envhub.client.transport import AsyncTransport
from envhub.core.status import MAX_BATCH_STEPS
from envhub.v1 import envhub_pb2 as pb

MAX_BATCH = MAX_BATCH_STEPS
"""Most steps one coalesced StepBatch carries: the server's cap."""

_Waiting = list[tuple[calls.Call[Any], "asyncio.Future[Message]"]]


class CoalescingTransport:
    """Steps sent in one loop turn go as one StepBatch over `inner`; every other call passes through."""

    def __init__(
        self, inner: AsyncTransport, policy: RetryPolicy = DEFAULT_POLICY, max_batch: int = MAX_BATCH, depth: int = 1
    ) -> None:
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be between 1 and {MAX_BATCH}, not {max_batch}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        self._depth = depth
        self._in_flight = 0
        """Steps in batches sent and not answered yet."""
        self._answered: set[str] = set()
        """Sessions of the steps answered since the last flush: their callers may be about to step again, so they
        count as stepping until the next flush (else a turn's batches would shrink turn after turn)."""
        self._inner = inner
        self._policy = policy
        self._max_batch = max_batch
        self._waiting: dict[float | None, _Waiting] = {}
        """Steps not sent yet, by timeout (a batch has one deadline)."""
        self._flush_due = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, call: calls.Call[Any]) -> Message:
        if call.effect is not calls.Effect.STEPS:
            return await self._inner.send(call)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        self._waiting.setdefault(call.timeout, []).append((call, future))
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        """Send every waiting step (the next loop turn after the first of them was sent)."""
        self._flush_due = False
        waiting, self._waiting = self._waiting, {}
        batches = [
            batch
            for entries in waiting.values()
            for batch in self._split([(call, future) for call, future in entries if not future.done()])
        ]  # not a cancelled caller's
        self._answered.clear()
        for batch in batches:
            self._in_flight += len(batch)
            self._spawn(self._send_batch(batch))

    def _split(self, live: _Waiting) -> list[_Waiting]:
        """One turn's steps in batches: of at most `max_batch` steps, and with a `depth` over 1, of about the
        steps in flight and waiting over `depth`, so that that many batches are in flight at once; the steps of
        one session stay in one batch (up to `max_batch`), which applies them in order."""
        if self._depth == 1 and len(live) <= self._max_batch:
            return [live]
        stepping = len(live) + self._in_flight + len(self._answered - {call.session_id for call, _ in live})
        size = min(self._max_batch, max(1, -(-stepping // self._depth)))
        if size >= len(live):
            return [live]
        batches: list[_Waiting] = []
        of_session: dict[str, _Waiting] = {}
        for entry in live:
            batch = of_session.get(entry[0].session_id)
            if batch is None or len(batch) >= self._max_batch:
                if not batches or len(batches[-1]) >= size:
                    batches.append([])
                batch = of_session[entry[0].session_id] = batches[-1]
            batch.append(entry)
        return batches

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_batch(self, entries: _Waiting) -> None:
        parts = [call for call, _ in entries]
        try:
            try:
                response = await self._inner.send(calls.batch(parts, return_errors=True, timeout=parts[0].timeout))
            finally:
                self._in_flight -= len(entries)
                self._answered.update(call.session_id for call in parts)
        except asyncio.CancelledError:  # closed with `cancel`: its callers are cancelled too
            for _, future in entries:
                future.cancel()
            raise
        except Exception as exc:  # the whole call failed: each of its steps failed with it
            for _, future in entries:
                if not future.done():
                    future.set_exception(exc)
            return
        answers = calls.expect(response, pb.StepBatchResponse).results
        for (call, future), answer in zip(entries, answers, strict=True):
            if future.done():
                continue
            if not answer.HasField("error"):
                future.set_result(pb.StepResponse(result=answer.result))
                continue
            error = from_status(answer.error)
            if self._policy.should_retry(call.retry, error, 0):
                self._spawn(self._alone(call, future))
            else:
                future.set_exception(error)

    async def _alone(self, call: calls.Call[Any], future: asyncio.Future[Message]) -> None:
        """`call` sent again on its own (same request_id), after the policy's first backoff."""
        try:
            await asyncio.sleep(self._policy.delay_s(0))
            response = await self._inner.send(call)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(response)

    async def open(self) -> None:
        """Nothing to open: `inner` belongs to the client this one came from, which opened it."""

    async def aclose(self, cancel: bool = False) -> None:
        """Send the steps still waiting and wait for every answer (with `cancel`: cancel them and the batches in
        flight instead); `inner` stays open for its owner."""
        if cancel:
            for entries in self._waiting.values():
                for _, future in entries:
                    future.cancel()
            self._waiting.clear()
            for task in list(self._tasks):
                task.cancel()
        elif self._waiting:
            self._flush()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
