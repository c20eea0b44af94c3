"""`envhub bench --profile kube`: deploy/k8s played with podman, a replica killed and all rolled, no episode lost.

One run, on this machine, of one server overlay (default Search-QA, the image that builds fastest):

1. `deploy/docker/build.sh <env>` (podman's layer cache makes a rebuild seconds), `kubectl kustomize
   deploy/k8s/overlays/<env>`, adapted for `podman kube play` (`manifests.adapt`: every change
   listed with its reason in the result), the Deployment's replicas played as pods, ready once
   their gRPC readiness probe answers SERVING (`cluster.Cluster`).
2. A reference: every episode played on one replica alone, undisturbed, with a plain client.
3. The rollout: `sessions` episodes at a time through one `FailoverTransport` over the Service's
   answer (the ready pods' addresses, looked up again as the client does for a `dns:///` target),
   `snapshot_every` as the trainer's RayJob sets it, one step of every episode per turn, a new
   episode as soon as one ends. Meanwhile: `quiet_s` undisturbed (the latency baseline); the pod
   holding the most sessions (its `envhub_sessions` gauge) killed (SIGKILL of the pod, as a node
   loss) and replaced; `quiet_s` again; a rolling restart as `kubectl rollout restart` makes it
   (maxSurge 1, maxUnavailable 0: a new pod, ready, then an old one terminated: out of the
   Service, preStop, SIGTERM, so it drains and its sessions move by fresh snapshots); `quiet_s`.
4. Checks: every episode completed with the reference's views (text, reward, step index, ...),
   steps numbered 1..n (nothing applied twice, nothing skipped), none lost, drained pods exit 0
   with no session left behind, no liveness restart. Step latency per phase against the quiet
   baseline, how long after the kill every episode stepped again, pod start-to-ready seconds.

Writes `<out>/envhub-kube-play-<env>.json` and `.md`; fails (exit 1) when a check fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envhub.bench import RESULTS
from envhub.bench.kube.cluster import Cluster, Pod, Podman, Termination
from envhub.bench.kube.manifests import Server, adapt, render
from envhub.client import EnvhubClient, types
from envhub.client.endpoints import REFRESH_S, Discovery
from envhub.client.failover import FailoverTransport
from envhub.client.pool_transport import PoolTransport
from envhub.client.retry import NO_RETRY
from envhub.client.sessions import Sessions
from envhub.client.transport import ChannelTransport, Settings
from envhub.core.errors import EnvhubError

ROOT = Path(__file__).resolve().parents[3]
"""The source checkout: deploy/ lives there."""
DETOURS = {
    "searchqa": tuple(
        f"<search> {{task}} {words}</search>"
        for words in ("", "who ", "where ", "when ", "what ", "why ", "how ", "which ")
    ),
    "alfworld": ("look", "inventory") * 4,
    "scienceworld": ("look around", "inventory") * 4,
    "webshop": (),
}
"""Actions an episode takes before its expert's ({task}: the task description), the first 4 to 8
of them by task, so that episodes last several turns and end at different turns, as a policy's
do; the expert then finishes the task."""
METRICS_PORT = 9090
READY_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class KubeBenchSettings:
    environment: str = "searchqa"
    out: str = str(RESULTS)
    sessions: int = 16
    """Episodes played at a time."""
    think_s: float = 1.0
    """Seconds between two turns: the policy generating the next actions (so that episodes last
    longer than the preStop wait, as a trainer's do, and a draining pod still holds sessions)."""
    snapshot_every: int = 2
    """The client's snapshot interval (the trainer RayJob's env.failover_snapshot_every)."""
    quiet_s: float = 15.0
    """Seconds of undisturbed rollout before the kill, between the kill and the restart, and after."""
    tasks: int = 32
    """Distinct tasks (each with its reference); episodes cycle through them."""
    max_steps: int = 12
    build: bool = True
    """Run deploy/docker/build.sh first (seconds when nothing changed)."""
    overlay: Path | None = None
    """Default: deploy/k8s/overlays/<environment>."""


@dataclass(frozen=True)
class Reference:
    """One task's episode on an undisturbed replica: the actions and every view they gave."""

    task_id: str
    seed: int
    actions: tuple[str, ...]
    start: types.EnvView
    views: tuple[types.EnvView, ...]


@dataclass
class _Episode:
    reference: Reference
    session_id: str
    views: list[types.EnvView] = field(default_factory=list)

    def next_action(self) -> str:
        return self.reference.actions[len(self.views)]


@dataclass
class _Rollout:
    """A trainer's rollout loop: `width` episodes at a time; each turn starts episodes in the free
    slots, makes one batched step of every episode (`SessionPort.step_each`), then waits `think_s`
    (the policy generating the next actions); until `stop`, then until the episodes under way ended."""

    sessions: Sessions
    references: list[Reference]
    width: int
    think_s: float
    phase: str = "quiet"
    turns: list[tuple[float, float, str]] = field(default_factory=list)
    """(when a turn began, its seconds: the episodes started, then the batched step; the phase then)."""
    completed: int = 0
    steps: int = 0
    differing: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stepped_at: dict[int, float] = field(default_factory=dict)
    """Episode number -> time its latest step came back."""
    active: dict[int, _Episode] = field(default_factory=dict)
    _started: int = 0

    def run(self, stop: threading.Event) -> None:
        while self.active or not stop.is_set():
            began, phase = time.monotonic(), self.phase
            while not stop.is_set() and len(self.active) < self.width:
                self._start()
            self._turn()
            self.turns.append((began, time.monotonic() - began, phase))
            stop.wait(self.think_s)

    def _start(self) -> None:
        number, self._started = self._started, self._started + 1
        reference = self.references[number % len(self.references)]
        try:
            view = self.sessions.start(reference.task_id, seed=reference.seed)
        except EnvhubError as error:
            self.lost.append(f"episode {number} ({reference.task_id}) not created: {error.code.name} {error}")
            return
        if view != reference.start:
            self.differing.append(f"episode {number} ({reference.task_id}): its first view differs")
        self.active[number] = _Episode(reference, view.session_id)

    def _turn(self) -> None:
        numbers = list(self.active)
        steps = [(self.active[n].session_id, self.active[n].next_action()) for n in numbers]
        try:
            answers: list[types.EnvView | EnvhubError] = self.sessions.step_each(steps)
        except EnvhubError as error:  # the whole batch failed: every episode in it is lost
            answers = [error] * len(numbers)
        done = time.monotonic()
        for number, answer in zip(numbers, answers, strict=True):
            episode = self.active[number]
            if isinstance(answer, EnvhubError):
                self.lost.append(f"episode {number} ({episode.reference.task_id}): {answer.code.name} {answer}")
                del self.active[number]
                continue
            episode.views.append(answer)
            self.steps += 1
            self.stepped_at[number] = done
            if len(episode.views) == len(episode.reference.actions):
                self._finish(number, episode)
                del self.active[number]

    def _finish(self, number: int, episode: _Episode) -> None:
        self.sessions.end(episode.session_id)
        self.completed += 1
        indices = [view.step_index for view in episode.views]
        if indices != list(range(1, len(indices) + 1)):
            self.differing.append(f"episode {number} ({episode.reference.task_id}): step indices {indices}")
        elif tuple(episode.views) != episode.reference.views:
            pairs = zip(episode.views, episode.reference.views, strict=True)
            first = next(i for i, (seen, expected) in enumerate(pairs) if seen != expected)
            self.differing.append(f"episode {number} ({episode.reference.task_id}): step {first + 1} differs")


def references(target: str, environment: str, count: int, max_steps: int) -> list[Reference]:
    """`count` episodes on one replica alone, through a plain client: the detours, then the expert's actions."""
    found = []
    with EnvhubClient(target) as client:
        sessions = Sessions(client, environment, max_steps=max_steps)
        for number, task_id in enumerate(sessions.task_ids()[:count]):
            start = sessions.start(task_id, seed=number % 7)
            actions: list[str] = []
            views: list[types.EnvView] = []
            kept = DETOURS[environment][: 4 + number % 5]
            detours = [detour.format(task=start.task_description or start.text) for detour in kept]
            while not (views and (views[-1].terminated or views[-1].truncated)):
                action = detours[len(actions)] if len(actions) < len(detours) else sessions.expert(start.session_id)[0]
                actions.append(action)
                views.append(sessions.step(start.session_id, action))
            sessions.end(start.session_id)
            found.append(Reference(task_id, number % 7, tuple(actions), start, tuple(views)))
    return found


def _sessions_on(pod: Pod) -> int:
    """The pod's `envhub_sessions` gauge (its /metrics), summed over environments and tenants."""
    with urllib.request.urlopen(f"http://{pod.ip}:{METRICS_PORT}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("envhub_sessions{")))


def _template_hash(server: Server, restarted_at: str) -> str:
    """A pod-template-hash: the template and `kubectl rollout restart`'s restartedAt annotation."""
    return hashlib.sha256(json.dumps([server.pod_spec, restarted_at], sort_keys=True).encode()).hexdigest()[:10]


@dataclass
class _Timeline:
    """What happened to the pods, in seconds since the rollout began."""

    began: float
    events: list[dict[str, Any]] = field(default_factory=list)
    terminations: list[dict[str, Any]] = field(default_factory=list)

    def note(self, event: str, **details: Any) -> None:
        entry = {"t_s": round(time.monotonic() - self.began, 2), "event": event, **details}
        self.events.append(entry)
        print(f"  {entry['t_s']:7.1f} s  {event} {details or ''}", flush=True)


def _disrupt(cluster: Cluster, rollout: _Rollout, settings: KubeBenchSettings, timeline: _Timeline) -> None:
    """The kill and its replacement, then the rolling restart, each after `quiet_s` of quiet."""
    server = cluster.server
    time.sleep(settings.quiet_s)
    rollout.phase = "kill"
    victim = max(cluster.live(), key=_sessions_on)
    timeline.note("kill", pod=victim.name, sessions=_sessions_on(victim))
    killed_at = cluster.kill(victim)
    cut = list(rollout.active)
    replacement = cluster.create(victim.template_hash)
    _wait_all_stepped_since(rollout, cut, killed_at, timeline)
    cluster.wait_ready([replacement], READY_TIMEOUT_S)
    timeline.note("replacement ready", pod=replacement.name)
    rollout.phase = "quiet (after the kill)"
    time.sleep(settings.quiet_s)

    rollout.phase = "rolling restart"
    revision = _template_hash(server, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    timeline.note("rollout restart", revision=revision)
    leaving: list[threading.Thread] = []
    for old in cluster.live(victim.template_hash):
        if server.max_surge > 0:  # a new pod first; the old one goes once it is ready
            _surge(cluster, revision, timeline)
            leaving.append(_terminate_async(cluster, old, timeline))
        else:  # maxUnavailable > 0: the old pod first
            leaving.append(_terminate_async(cluster, old, timeline))
            _surge(cluster, revision, timeline)
    for thread in leaving:
        thread.join()
    rollout.phase = "quiet (after the restart)"
    time.sleep(settings.quiet_s)
    timeline.note("done")


def _wait_all_stepped_since(rollout: _Rollout, cut: list[int], killed_at: float, timeline: _Timeline) -> None:
    """Block until every episode of `cut` (those under way when the pod was dead) stepped since or
    ended; note how long after the kill the last of them stepped."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(rollout.stepped_at.get(n, 0.0) > killed_at or n not in rollout.active for n in cut):
            break
        time.sleep(0.05)
    after = [rollout.stepped_at.get(n, 0.0) - killed_at for n in cut]
    timeline.note("every episode stepped again", after_kill_s=round(max([a for a in after if a > 0], default=0.0), 2))


def _surge(cluster: Cluster, revision: str, timeline: _Timeline) -> Pod:
    new = cluster.create(revision)
    cluster.wait_ready([new], READY_TIMEOUT_S)
    timeline.note("new pod ready", pod=new.name, start_to_ready_s=round(time.monotonic() - new.created, 1))
    return new


def _terminate_async(cluster: Cluster, old: Pod, timeline: _Timeline) -> threading.Thread:
    """`cluster.terminate(old)` on a thread of its own (the rollout goes on, the next pod starts)."""
    sessions = _sessions_on(old)
    timeline.note("terminate", pod=old.name, sessions=sessions)
    at_sigterm: list[int] = []

    def run() -> None:
        ended: Termination = cluster.terminate(old, before_sigterm=lambda: at_sigterm.append(_sessions_on(old)))
        record = {**asdict(ended), "sessions": sessions, "sessions_at_sigterm": at_sigterm[0]}
        record["sessions_lost"] = "they are lost" in ended.log
        record["drained"] = "draining" in ended.log and ended.log.rstrip().endswith("stopped")
        del record["log"]
        timeline.terminations.append(record)
        timeline.note("terminated", pod=old.name, exit_code=ended.exit_code, stop_s=round(ended.stop_s, 1))

    thread = threading.Thread(target=run, name=f"terminate-{old.name}")
    thread.start()
    return thread


def _latency(rollout: _Rollout) -> dict[str, dict[str, float]]:
    """Seconds of a turn's batched step per phase: count, median, max, each against the first quiet phase."""
    phases: dict[str, list[float]] = {}
    for _, seconds, phase in rollout.turns:
        phases.setdefault(phase, []).append(seconds)
    base = phases.get("quiet", [0.0])
    base_p50, base_max = statistics.median(base), max(base)
    return {
        phase: {
            "turns": len(values),
            "p50_ms": 1000 * statistics.median(values),
            "max_ms": 1000 * max(values),
            "p50_ratio": statistics.median(values) / base_p50 if base_p50 else 0.0,
            "max_ratio": max(values) / base_max if base_max else 0.0,
        }
        for phase, values in phases.items()
    }


def _client(cluster: Cluster, snapshot_every: int) -> tuple[EnvhubClient, FailoverTransport]:
    """The trainer's client: `FailoverTransport` over the Service's answer, looked up again after a
    replica fails and every `REFRESH_S` seconds (what `dns:///envhub-<env>...:50051` gives); as in
    `FailoverTransport.over`, the replicas' channels do not retry (the failover transport does, once
    the replica is known to be there: a vanished pod costs one failed connect, not one per try)."""
    settings = Settings(policy=NO_RETRY)
    discovery = Discovery(cluster.endpoints, lambda address: ChannelTransport(address, settings), REFRESH_S)
    transport = FailoverTransport(PoolTransport(discovery=discovery), snapshot_every=snapshot_every)
    return EnvhubClient(transport), transport


def _build(environment: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "deploy/docker/build.sh"), environment], capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"deploy/docker/build.sh {environment} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return time.monotonic() - started


def run_kube_bench(settings: KubeBenchSettings) -> dict[str, Any]:
    """Build, render, play, roll out through a kill and a rolling restart; write and return the result."""
    build_s = _build(settings.environment) if settings.build else 0.0
    overlay = settings.overlay or ROOT / "deploy/k8s/overlays" / settings.environment
    server = adapt(render(overlay))
    print(f"{overlay}: {server.name}, adapted for podman:")
    for adaptation in server.adaptations:
        print(f"  - {adaptation.what}")
    load_start = os.getloadavg()[0]
    with Cluster(server, Podman(ROOT / "deploy/docker/containers.conf")) as cluster:
        pods = [cluster.create(_template_hash(server, "")) for _ in range(server.replicas)]
        cluster.wait_ready(pods, READY_TIMEOUT_S)
        start_to_ready = [p.started_at - p.created for p in pods if p.started_at is not None]
        print(f"{len(pods)} pods ready: {', '.join(p.name for p in pods)}", flush=True)
        refs = references(cluster.endpoints()[0], settings.environment, settings.tasks, settings.max_steps)
        client, transport = _client(cluster, settings.snapshot_every)
        sessions = Sessions(client, settings.environment, max_steps=settings.max_steps)
        rollout = _Rollout(sessions, refs, settings.sessions, settings.think_s)
        timeline = _Timeline(time.monotonic())
        stop = threading.Event()
        worker = threading.Thread(target=rollout.run, args=(stop,), name="rollout")
        worker.start()
        try:
            _disrupt(cluster, rollout, settings, timeline)
        finally:
            stop.set()
            worker.join()
            client.close()
        liveness_restarts = sum(p.liveness_restarts for p in cluster.pods)
        at_end = [p.name for p in cluster.live()]
    result: dict[str, Any] = {
        "environment": settings.environment,
        "deployment": server.name,
        "image": server.image,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "adaptations": [asdict(a) for a in server.adaptations],
        "build_s": round(build_s, 1),
        "start_to_ready_s": [round(s, 1) for s in start_to_ready],
        "episodes": {
            "completed": rollout.completed,
            "differing": rollout.differing,
            "lost": rollout.lost,
            "steps": rollout.steps,
            "turns": len(rollout.turns),
            "references": len(refs),
        },
        "recoveries": transport.recoveries,
        "migrations": transport.migrations,
        "latency": _latency(rollout),
        "events": timeline.events,
        "terminations": timeline.terminations,
        "liveness_restarts": liveness_restarts,
        "pods_at_end": at_end,
        "cpu_count": os.cpu_count(),
        "load_average_1m": [round(load_start, 1), round(os.getloadavg()[0], 1)],
    }
    result["checks"] = _checks(result)
    result["passed"] = all(result["checks"].values())
    _write(result, Path(settings.out))
    return result


def _checks(result: dict[str, Any]) -> dict[str, bool]:
    episodes, ends = result["episodes"], result["terminations"]
    killed = next(event for event in result["events"] if event["event"] == "kill")
    return {
        "no episode lost": not episodes["lost"],
        "every episode equals its reference, steps 1..n": not episodes["differing"] and episodes["completed"] > 0,
        "the killed pod's sessions restored from held snapshots": (
            killed["sessions"] == 0 or result["recoveries"] > result["migrations"]
        ),
        "draining pods' sessions moved by fresh snapshots": (
            result["migrations"] > 0 or not any(end["sessions_at_sigterm"] for end in ends)
        ),
        "drained pods exit 0, no session left behind": all(
            end["exit_code"] == 0 and end["drained"] and not end["sessions_lost"] for end in ends
        ),
        "no liveness restart": result["liveness_restarts"] == 0,
    }


def _write(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = f"envhub-kube-play-{result['environment']}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    episodes, settings = result["episodes"], result["settings"]
    verdict = "; ".join(f"{check}: {'yes' if ok else 'NO'}" for check, ok in result["checks"].items())
    lines = [
        f"# envhub bench --profile kube: {result['environment']}",
        "",
        f"`kubectl kustomize deploy/k8s/overlays/{result['environment']}` played with `podman kube play` "
        f"(podman 4.3, rootful) on one machine ({result['cpu_count']} cores shared with other work; load "
        f"average {result['load_average_1m'][0]} at the start, {result['load_average_1m'][1]} at the end). "
        f"{settings['sessions']} episodes at a time through one `FailoverTransport` (a snapshot every "
        f"{settings['snapshot_every']} steps) over the Service's answer, as the trainer's rollouts use it; "
        f"{settings['quiet_s']:.0f} s undisturbed, a pod killed, {settings['quiet_s']:.0f} s, a rolling restart, "
        f"{settings['quiet_s']:.0f} s.",
        "",
        f"**{'PASSED' if result['passed'] else 'FAILED'}**: {verdict}.",
        "",
        f"Episodes: {episodes['completed']} completed ({episodes['steps']} steps in {episodes['turns']} turns, "
        f"{episodes['references']} distinct tasks), {len(episodes['differing'])} differing from the reference "
        f"(the same episodes on one undisturbed replica), {len(episodes['lost'])} lost. Sessions moved: "
        f"{result['recoveries']} ({result['migrations']} by a fresh snapshot on a draining pod, "
        f"{result['recoveries'] - result['migrations']} from the held snapshot and a replay). Pods start to "
        f"ready: {', '.join(f'{s} s' for s in result['start_to_ready_s'])}; image build {result['build_s']} s.",
        "",
        "A turn starts episodes in the free slots and makes one batched step of every episode under way "
        f"(`step_each`), then waits {settings['think_s']} s (policy time); its seconds (without the wait) per "
        "phase, against the first quiet phase:",
        "",
        "| phase | turns | turn p50 ms | turn max ms | p50 / quiet | max / quiet |",
        "|---|---|---|---|---|---|",
    ]
    for phase, f in result["latency"].items():
        lines.append(
            f"| {phase} | {f['turns']} | {f['p50_ms']:.1f} | {f['max_ms']:.0f} | {f['p50_ratio']:.2f} "
            f"| {f['max_ratio']:.2f} |"
        )
    lines += ["", "| t (s) | event |", "|---|---|"]
    for event in result["events"]:
        details = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("t_s", "event"))
        lines.append(f"| {event['t_s']} | {event['event']}{': ' + details if details else ''} |")
    lines += [
        "",
        "| terminated pod | sessions at preStop | at SIGTERM | preStop s | SIGTERM to exit s | exit code | drained |",
        "|---|---|---|---|---|---|---|",
    ]
    for end in result["terminations"]:
        lines.append(
            f"| {end['pod']} | {end['sessions']} | {end['sessions_at_sigterm']} | {end['pre_stop_s']:.1f} "
            f"| {end['stop_s']:.1f} | {end['exit_code']} "
            f"| {'yes' if end['drained'] and not end['sessions_lost'] else 'NO'} |"
        )
    lines += ["", "What was adapted for podman, and why:", ""]
    lines += [f"* {a['what']}: {a['why']}." for a in result["adaptations"]]
    for kind in ("differing", "lost"):
        if episodes[kind]:
            lines += ["", f"Episodes {kind}:", "", *(f"* {line}" for line in episodes[kind][:20])]
    lines.append("")
    (out / f"{name}.md").write_text("\n".join(lines))
    print("\n".join(lines), flush=True)
