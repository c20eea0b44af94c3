"""Fuzzing every RPC of a real server with hypothesis-generated requests.

Requests are built from the proto descriptors (every field, nested messages, repeated fields,
maps, oneofs) with values drawn from random unicode and integers at their type's edges, mixed
with the values a real client sends (live session ids, task ids, actions, option names, signed
snapshots and tampered copies) so that calls reach deep into the server; some requests are raw
bytes (garbage, or a valid request with bytes flipped). Every answer must be OK or carry a code
and reason listed in docs/protocol.md's error table, never INTERNAL, UNKNOWN or UNAVAILABLE;
the server's workers never restart; a bystander session of another tenant (whose id the fuzzer
never sees) steps on exactly as an untouched one. CI runs a bounded round on the toy kind and
Search-QA (about a minute); `pytest -m bench tests/server/test_fuzz.py` runs the long round on
every environment (`ENVHUB_FUZZ_EXAMPLES`, default 5,000 per environment).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor, message_factory
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envhub.bench.rollout import SERVER_SETTINGS
from envhub.bench.run import PROFILES
from envhub.client import EnvhubClient
from envhub.server.background import BackgroundServer
from envhub.testing import REFERENCE
from envhub.v1 import envhub_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
SERVICE = pb.DESCRIPTOR.services_by_name["EnvHub"]
FORBIDDEN = {"INTERNAL", "UNKNOWN", "UNAVAILABLE", "DEADLINE_EXCEEDED"}
"""Codes no request may cause on a healthy server (documented or not)."""
TOKEN, BYSTANDER_TOKEN = "fuzzer", "bystander"
FUZZER_QUOTA = 80
"""The fuzzer's sessions (of the server's 96): creates and forks also meet TENANT_QUOTA and TOO_MANY_SESSIONS."""
CALL_TIMEOUT_S = 60.0
LONG_EXAMPLES = int(os.environ.get("ENVHUB_FUZZ_EXAMPLES", "5000"))


def documented() -> set[tuple[str, str]]:
    """(code, reason) pairs of docs/protocol.md's error table; gRPC's own errors carry their code as reason."""
    pairs = set()
    for line in (ROOT / "docs/protocol.md").read_text().splitlines():
        match = re.match(r"\| ([A-Z_]+) \| ([^|]+) \|", line)
        if match:
            code, reasons = match.groups()
            pairs |= {(code, reason) for reason in re.findall(r"`([A-Z_]+)`", reasons)}
            if "gRPC's own" in reasons:
                pairs.add((code, code))
    return pairs


@dataclass
class Known:
    """Values of the fuzzed server a real client would send, grown as the fuzzer creates sessions."""

    environment: str
    tasks: list[str]
    splits: list[str]
    options: list[str]
    actions: list[str]
    sessions: list[str] = field(default_factory=list)
    snapshots: list[bytes] = field(default_factory=list)

    def pick(self, values: list[Any]) -> st.SearchStrategy[Any]:
        """One of `values` as they are when drawn (the lists grow during the run)."""
        return st.integers(0, 1 << 30).map(lambda i: values[i % len(values)] if values else "")


def _tampered(snapshot: bytes, position: int, value: int) -> bytes:
    at = position % len(snapshot)
    return snapshot[:at] + bytes([value]) + snapshot[at + 1 :]


def _strings(known: Known, name: str) -> st.SearchStrategy[str]:
    text = st.text(max_size=40)
    big = st.integers(1, 6000).map(lambda n: "x" * n)
    special = {
        "session_id": st.one_of(known.pick(known.sessions), text.map(lambda t: f"r1.{t}"), big),
        "environment": st.sampled_from([known.environment] * 6 + ["", "nosuch", known.environment.upper()]),
        "task_id": known.pick(known.tasks),
        "split": st.one_of(st.sampled_from(known.splits), text),
        "action": st.one_of(st.sampled_from(known.actions), st.sampled_from(["", " \t\n", "\x00"]), big),
        "request_id": st.text(max_size=140),
        "page_token": st.one_of(st.integers(-5, 5000).map(str), text),
    }
    strategy = special.get(name)
    return text if strategy is None else st.one_of(strategy, strategy, strategy, text)  # mostly what a client sends


def _scalar(known: Known, field_descriptor: descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field_descriptor.type
    F = descriptor.FieldDescriptor
    if kind == F.TYPE_STRING:
        return _strings(known, field_descriptor.name)
    if kind == F.TYPE_BYTES:
        valid = known.pick(known.snapshots)
        tampered = st.builds(_tampered, valid.filter(bool), st.integers(0, 1 << 20), st.integers(0, 255))
        return st.one_of(valid, tampered, st.binary(max_size=300))
    if kind == F.TYPE_BOOL:
        return st.booleans()
    if kind in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return st.one_of(st.integers(0, 70), st.integers(0, 2**32 - 1))
    if kind in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return st.one_of(st.integers(0, 70), st.integers(0, 2**64 - 1))
    if kind in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_ENUM):
        return st.integers(-(2**31), 2**31 - 1)
    if kind in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
        return st.integers(-(2**63), 2**63 - 1)
    if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if kind == F.TYPE_FLOAT else 64)
    raise AssertionError(f"no strategy for field {field_descriptor.full_name}")


def _plausible(known: Known, name: str) -> st.SearchStrategy[Any] | None:
    """What a well-behaved client sends in field `name` (None: no such value, the field stays unset)."""
    values: dict[str, st.SearchStrategy[Any]] = {
        "session_id": known.pick(known.sessions),
        "environment": st.just(known.environment),
        "task_id": known.pick(known.tasks),
        "split": st.sampled_from(known.splits),
        "index": st.integers(0, 3),
        "action": st.sampled_from(known.actions),
        "request_id": st.uuids().map(str),
        "seed": st.integers(0, 100),
        "max_steps": st.integers(0, 50),
        "count": st.integers(1, 4),
        "page_size": st.integers(0, 5),
        "snapshot": known.pick(known.snapshots),
        "include_admissible_actions": st.booleans(),
        "call_id": st.integers(0, 2**64 - 1),
    }
    return values.get(name)


@st.composite
def message(
    draw: st.DrawFn,
    known: Known,
    message_descriptor: descriptor.Descriptor,
    depth: int = 0,
    plausible: bool | None = None,
) -> Message:
    """A message of `message_descriptor`: either plausible (fields unset or as a real client sets them, and
    so its sub-messages) or wild (most fields set to anything of their type); one member per oneof."""
    plausible = draw(st.booleans()) if plausible is None else plausible
    result = message_factory.GetMessageClass(message_descriptor)()
    chosen_oneofs = {oneof.name: draw(st.sampled_from([*oneof.fields, None])) for oneof in message_descriptor.oneofs}
    for field_descriptor in message_descriptor.fields:
        oneof = field_descriptor.containing_oneof
        if oneof is not None and chosen_oneofs[oneof.name] is not field_descriptor:
            continue
        if oneof is None and not draw(st.sampled_from([True, True, True, False])):  # most fields set
            continue
        if plausible and field_descriptor.message_type is None:
            value = _plausible(known, field_descriptor.name)
            if value is not None and not field_descriptor.is_repeated:
                setattr(result, field_descriptor.name, draw(value))
            continue
        if plausible and field_descriptor.message_type.GetOptions().map_entry:
            continue
        if plausible and oneof is None and not field_descriptor.is_repeated and draw(st.booleans()):
            continue  # a plausible request leaves half its optional sub-messages (a reset's task) unset
        _fill(draw, known, result, field_descriptor, depth, plausible)
    return result


def _fill(
    draw: st.DrawFn, known: Known, result: Message, field_descriptor: Any, depth: int, plausible: bool = False
) -> None:
    name = field_descriptor.name
    target = getattr(result, name)
    if field_descriptor.message_type is not None and field_descriptor.message_type.GetOptions().map_entry:
        keys = st.one_of(st.sampled_from(known.options or ["x"]), st.text(max_size=20))
        values = st.one_of(st.integers(-(10**9), 10**9).map(str), st.sampled_from(["nan", "inf", "1e999"]), st.text())
        target.update(draw(st.dictionaries(keys, values, max_size=4)))
    elif field_descriptor.is_repeated:
        if field_descriptor.message_type is not None:
            if depth >= 2:
                return
            items = draw(st.lists(message(known, field_descriptor.message_type, depth + 1, plausible), max_size=6))
            copies = draw(st.sampled_from([1, 1, 1, 1, 4097]))  # now and then a batch over the limit
            target.extend(items * copies)
        else:
            target.extend(draw(st.lists(_scalar(known, field_descriptor), max_size=6)))
    elif field_descriptor.message_type is not None:
        if depth < 3:
            target.CopyFrom(draw(message(known, field_descriptor.message_type, depth + 1, plausible)))
    else:
        setattr(result, name, draw(_scalar(known, field_descriptor)))


@st.composite
def request_bytes(draw: st.DrawFn, known: Known, method: descriptor.MethodDescriptor) -> bytes:
    """A request of `method` as bytes: a generated message, or raw bytes (garbage or a flipped message)."""
    encoded: bytes = draw(message(known, method.input_type)).SerializeToString()
    mode = draw(st.sampled_from(["message"] * 6 + ["garbage", "flipped", "bad-utf8"]))
    if mode == "garbage":
        return draw(st.binary(max_size=200))
    if mode == "flipped" and encoded:
        return _tampered(encoded, draw(st.integers(0, 1 << 20)), draw(st.integers(0, 255)))
    if mode == "bad-utf8":
        return encoded + b"\x12\x02\xff\xfe"  # field 2 (a string in most requests) with invalid UTF-8
    return encoded


@dataclass
class Target:
    """The fuzzed server, the values it knows and what the fuzzer saw."""

    server: BackgroundServer
    channel: grpc.Channel
    known: Known
    allowed: set[tuple[str, str]]
    seen: set[tuple[str, str, str]] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    """Methods that answered OK at least once."""
    unsupported: set[str] = field(default_factory=set)
    """Methods the environment does not support (GetExpertActions without an expert)."""

    def check(self, method: str, status: Any, code: grpc.StatusCode) -> None:
        """`code` (and the ErrorInfo of `status`, a google.rpc.Status or None) is documented and allowed."""
        if code == grpc.StatusCode.OK:
            self.answered.add(method)
            return
        reason = code.name
        if status is not None:
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    assert info.domain == "envhub.dev", info
                    reason = info.reason
        self.seen.add((method, code.name, reason))
        assert code.name not in FORBIDDEN, f"{method} answered {code.name} {reason}: {getattr(status, 'message', '')}"
        assert (code.name, reason) in self.allowed, f"{method} answered an undocumented {code.name} {reason}"

    def learn(self, method: str, request: bytes, answer: bytes) -> None:
        """Remember the sessions and snapshots an OK answer made, forget closed sessions (bounded)."""
        response = message_factory.GetMessageClass(SERVICE.methods_by_name[method].output_type).FromString(answer)
        if method == "CloseSession":
            self.forget(pb.CloseSessionRequest.FromString(request).session_id)
        elif method in ("CreateSession", "RestoreSnapshot"):
            self.known.sessions.append(response.session_id)  # type: ignore[attr-defined]
        elif method == "ForkSession":
            self.known.sessions.extend(response.session_ids)  # type: ignore[attr-defined]
        elif method == "RestoreSnapshotBatch":
            restored = [entry.session.session_id for entry in response.results if entry.HasField("session")]  # type: ignore[attr-defined]
            self.known.sessions.extend(restored)
        elif method == "CreateSnapshot":
            self.known.snapshots.append(response.snapshot)  # type: ignore[attr-defined]
        del self.known.sessions[:-24], self.known.snapshots[:-8]

    def forget(self, session_id: str) -> None:
        """A session the fuzzer closed is no longer offered."""
        self.known.sessions[:] = [known for known in self.known.sessions if known != session_id]

    def unary(self, method: str, request: bytes) -> None:
        call = self.channel.unary_unary(f"/{SERVICE.full_name}/{method}")
        try:
            answer = call(request, timeout=CALL_TIMEOUT_S, metadata=[("authorization", f"Bearer {TOKEN}")])
        except grpc.RpcError as error:
            self.check(method, rpc_status.from_call(error), error.code())
            return
        self.answered.add(method)
        self.learn(method, request, answer)

    def stream(self, requests: list[bytes]) -> None:
        call = self.channel.stream_stream(f"/{SERVICE.full_name}/SessionStream")
        closing = {}
        for body in requests:
            with contextlib.suppress(DecodeError):  # raw bytes: end the stream, close nothing
                request = pb.SessionStreamRequest.FromString(body)
                if request.HasField("close"):
                    closing[request.call_id] = request.close.session_id
        try:
            for answer in call(iter(requests), timeout=CALL_TIMEOUT_S, metadata=[("authorization", f"Bearer {TOKEN}")]):
                response = pb.SessionStreamResponse.FromString(answer)
                if response.HasField("error"):
                    code = {c.value[0]: c for c in grpc.StatusCode}[response.error.code]
                    self.check("SessionStream.call", response.error, code)
                    continue
                self.answered.add(f"SessionStream.{response.WhichOneof('outcome')}")
                if response.HasField("create"):
                    self.known.sessions.append(response.create.session_id)
                elif response.HasField("close") and response.call_id in closing:
                    self.forget(closing[response.call_id])
        except grpc.RpcError as error:
            self.check("SessionStream", rpc_status.from_call(error), error.code())


def _tenants_file(folder: Path) -> Path:
    path = folder / "tenants.yaml"
    fuzzer = f"{{tokens: [{TOKEN}], max_sessions: {FUZZER_QUOTA}}}"
    path.write_text(f"tenants:\n  fuzzer: {fuzzer}\n  bystander: {{tokens: [{BYSTANDER_TOKEN}]}}\n")
    return path


@pytest.fixture(scope="module", params=[REFERENCE, "searchqa"])
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from _target(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=[REFERENCE, "searchqa", "webshop", "alfworld", "scienceworld"])
def long_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from _target(request.param, tmp_path_factory)


def _target(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    folder = tmp_path_factory.mktemp("fuzz")
    name = "toy" if kind == REFERENCE else kind
    config = {kind: SERVER_SETTINGS[kind]} if kind in SERVER_SETTINGS else {}
    server = BackgroundServer.local(
        kind, tenants_file=str(_tenants_file(folder)), max_sessions=96, workers=2, environment_config=config
    )
    with server, grpc.insecure_channel(server.target) as channel, EnvhubClient(server.target, token=TOKEN) as client:
        [info] = client.list_environments()
        tasks = [task.task_id for task in client.list_tasks(name)][:50]
        actions = list(PROFILES[name].actions) if name in PROFILES else ["inc", "win"]
        known = Known(name, tasks, list(info.splits), list(info.options), actions)
        for task in tasks[:8]:
            start = client.create_session(name, task)
            known.sessions.append(start.session_id)
        known.snapshots.append(client.snapshot(start.session_id).data)
        unsupported = set() if info.capabilities.expert else {"GetExpertActions"}
        yield Target(server, channel, known, documented(), unsupported=unsupported)


@dataclass(frozen=True)
class Bystander:
    """A session of another tenant, stepped before and after the fuzzing; the fuzzer never sees its id."""

    client: EnvhubClient
    session_id: str
    reference: str
    """A twin made at the same time, stepped only at the end (the fuzzer may fill the server meanwhile)."""
    action: str

    @classmethod
    def start(cls, target: Target) -> Bystander:
        client = EnvhubClient(target.server.target, token=BYSTANDER_TOKEN)
        environment, task_id = target.known.environment, target.known.tasks[0]
        session_id, reference = (client.create_session(environment, task_id).session_id for _ in range(2))
        bystander = cls(client, session_id, reference, target.known.actions[0])
        client.step(bystander.session_id, bystander.action)
        return bystander

    def check(self) -> None:
        """The bystander steps on as its untouched twin stepped the same way does."""
        want = [self.client.step(self.reference, self.action) for _ in range(2)][1]
        assert self.client.step(self.session_id, self.action) == want
        for session_id in (self.reference, self.session_id):
            self.client.close_session(session_id)
        self.client.close()


def _fuzz(target: Target, examples: int, derandomize: bool) -> None:
    pids = [worker.pid for worker in target.server.server.pool.workers()]
    bystander = Bystander.start(target)
    unary = [method for method in SERVICE.methods if not method.client_streaming]

    @settings(
        max_examples=examples,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(list(SERVICE.methods)).flatmap(_call(target)))
    def run(call: Callable[[Target], None]) -> None:
        call(target)

    _tour(target)
    run()
    assert [worker.pid for worker in target.server.server.pool.workers()] == pids, "a worker died"
    assert all(worker.alive for worker in target.server.server.pool.workers())
    bystander.check()
    every = {method.name for method in unary} | {
        f"SessionStream.{call}" for call in ("create", "reset", "step", "close")
    }
    assert target.answered == every - target.unsupported, f"never answered OK: {sorted(every - target.answered)}"
    errors = {method for method, _, _ in target.seen}
    assert len(errors) >= 10, f"the fuzzer reached too few RPCs with errors: {sorted(target.seen)}"


def _tour(target: Target) -> None:
    """One request of every RPC as a real client sends it (each must answer OK), before the random ones."""
    known = target.known
    environment, task, action, sessions = known.environment, known.tasks[0], known.actions[0], known.sessions[:8]
    selector = pb.TaskSelector(task_id=task)
    calls: list[tuple[str, Message]] = [
        ("ListEnvironments", pb.ListEnvironmentsRequest()),
        ("ListTasks", pb.ListTasksRequest(environment=environment)),
        ("CreateSession", pb.CreateSessionRequest(environment=environment, task=selector)),
        ("ResetSession", pb.ResetSessionRequest(session_id=sessions[0])),
        ("Step", pb.StepRequest(session_id=sessions[0], action=action)),
        ("StepBatch", pb.StepBatchRequest(steps=[pb.StepRequest(session_id=sessions[1], action=action)])),
        ("CreateSnapshot", pb.CreateSnapshotRequest(session_id=sessions[2])),
        ("RestoreSnapshot", pb.RestoreSnapshotRequest(snapshot=known.snapshots[0])),
        (
            "RestoreSnapshotBatch",
            pb.RestoreSnapshotBatchRequest(restores=[pb.RestoreSnapshotRequest(snapshot=known.snapshots[0])]),
        ),
        ("ForkSession", pb.ForkSessionRequest(session_id=sessions[2], count=2)),
        ("CloseSession", pb.CloseSessionRequest(session_id=sessions[7])),
    ]
    if "GetExpertActions" not in target.unsupported:
        calls.append(("GetExpertActions", pb.GetExpertActionsRequest(session_id=sessions[3])))
    for method, request in calls:
        target.unary(method, request.SerializeToString())
    stream = [
        pb.SessionStreamRequest(call_id=1, create=pb.CreateSessionRequest(environment=environment, task=selector)),
        pb.SessionStreamRequest(call_id=2, step=pb.StepRequest(session_id=sessions[4], action=action)),
        pb.SessionStreamRequest(call_id=3, reset=pb.ResetSessionRequest(session_id=sessions[4])),
        pb.SessionStreamRequest(call_id=4, close=pb.CloseSessionRequest(session_id=sessions[6])),
    ]
    target.stream([request.SerializeToString() for request in stream])


def _call(target: Target) -> Callable[[descriptor.MethodDescriptor], st.SearchStrategy[Callable[[Target], None]]]:
    """A strategy of one call of `method` (a SessionStream of up to 8 calls) on a target."""

    def strategy(method: descriptor.MethodDescriptor) -> st.SearchStrategy[Callable[[Target], None]]:
        requests = request_bytes(target.known, method)
        if method.client_streaming:  # calls as messages, now and then one request of raw bytes (ending the stream)
            calls = st.lists(message(target.known, method.input_type).map(lambda m: m.SerializeToString()), max_size=8)
            last = st.one_of(st.just([]), st.just([]), st.just([]), requests.map(lambda body: [body]))
            return st.tuples(calls, last).map(lambda parts: lambda t: t.stream(parts[0] + parts[1]))
        return requests.map(lambda body: lambda t: t.unary(method.name, body))

    return strategy


def test_fuzzed_requests_get_documented_answers_and_harm_nobody(target: Target) -> None:
    _fuzz(target, examples=400, derandomize=True)  # the same requests every run: CI is reproducible


@pytest.mark.bench
def test_fuzzed_requests_long_run_on_every_environment(long_target: Target) -> None:
    _fuzz(long_target, examples=LONG_EXAMPLES, derandomize=False)
