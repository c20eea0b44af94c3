"""The parts of Kubernetes that `podman kube play` lacks, for one server Deployment on this machine.

`Cluster(server)` plays each replica as a Pod with `podman kube play` and does the rest with the
manifests' values: the ReplicaSet (`create` names a pod `<deployment>-<template hash>-<suffix>`),
the kubelet (each pod's startup, readiness and liveness gRPC probes on its own thread; `terminate`:
out of the Service, the preStop hook, SIGTERM, SIGKILL when the grace period ends) and the
headless Service (`endpoints`: the addresses of the pods that are ready and not terminating,
what its DNS name answers). `kill` is a node loss: SIGKILL of every container, the pod removed.
Pods reach each other and this host on podman's kube network (`podman-default-kube-network`).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

import yaml

from envhub.bench.kube.manifests import Probe, Server, pod, secret
from envhub.tools.health import check

TICK_S = 0.2
"""How often the probe thread looks for probes that are due."""


class Podman:
    """The podman command line, with the repository's containers.conf (runc, ulimits: deploy/docker)."""

    def __init__(self, containers_conf: Path) -> None:
        self.env = {**os.environ, "CONTAINERS_CONF": str(containers_conf)}

    def __call__(self, *arguments: str, stdin: str | None = None, timeout: float = 120, check: bool = True) -> str:
        done = subprocess.run(
            ["podman", *arguments], input=stdin, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout


@dataclass
class Pod:
    """One replica and what the kubelet knows of it."""

    name: str
    template_hash: str
    ip: str
    created: float
    """time.monotonic() when it was played."""
    started_at: float | None = None
    """When its startup probe first succeeded."""
    ready: bool = False
    terminating: bool = False
    gone: bool = False
    liveness_failures: int = 0
    liveness_restarts: int = 0
    failure: str | None = None
    """Why the kubelet gave up on it (its startup probe never succeeded)."""
    due: dict[str, float] = field(default_factory=dict)
    """Probe name -> when it runs next."""


@dataclass(frozen=True)
class Termination:
    """How one pod ended under `Cluster.terminate`."""

    pod: str
    pre_stop_s: float
    """The preStop hook's seconds (it runs while the pod is already out of the Service)."""
    stop_s: float
    """From SIGTERM to the container's exit."""
    exit_code: int
    log: str


class Cluster:
    """One Deployment's pods on podman, its kubelet's probes and termination, its Service's answer."""

    def __init__(self, server: Server, podman: Podman) -> None:
        self.server = server
        self.podman = podman
        self.pods: list[Pod] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe_loop, name="kubelet-probes", daemon=True)
        self._run_lock = Path(tempfile.gettempdir()) / f"envhub-kube-{server.name}.lock"
        self._lock_file: IO[str] | None = None

    def __enter__(self) -> Cluster:
        """Wait for another run of this Deployment to end (one at a time: they share names), clean up
        what an interrupted one left, make the Secrets, start probing."""
        self._lock_file = self._run_lock.open("w")
        fcntl.flock(self._lock_file, fcntl.LOCK_EX)
        self._remove_leftovers()
        for name in self.server.secrets:
            self._make_secret(name)
        self._prober.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._prober.join(timeout=30)
        self._remove_leftovers()
        if self._lock_file is not None:
            self._lock_file.close()

    # ------------------------------------------------------------ the ReplicaSet's part

    def create(self, template_hash: str) -> Pod:
        """Play one replica of the template (`template_hash` names its revision); it starts unready."""
        name = f"{self.server.name}-{template_hash}-{secrets.token_hex(3)[:5]}"
        self.podman("kube", "play", "-", stdin=yaml.safe_dump(pod(self.server, name, template_hash)), timeout=300)
        infra = self.podman("pod", "inspect", "--format", "{{.InfraContainerID}}", name).strip()
        ip = self.podman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", infra)
        created = Pod(name, template_hash, ip.strip(), time.monotonic())
        with self._lock:
            self.pods.append(created)
        return created

    def live(self, template_hash: str | None = None) -> list[Pod]:
        """The pods not gone and not terminating (of one revision if given)."""
        with self._lock:
            return [
                p for p in self.pods if not p.gone and not p.terminating and template_hash in (None, p.template_hash)
            ]

    def wait_ready(self, pods: list[Pod], timeout_s: float) -> None:
        """Block until every pod of `pods` passed its readiness probe; TimeoutError names the others."""
        deadline = time.monotonic() + timeout_s
        while not all(p.ready for p in pods):
            failed = next((p.failure for p in pods if p.failure), None)
            if failed:
                raise RuntimeError(failed)
            if time.monotonic() > deadline:
                late = [p.name for p in pods if not p.ready]
                raise TimeoutError(f"pods not ready after {timeout_s} s: {late}\n{self.logs(late[0])}")
            time.sleep(TICK_S)

    # ------------------------------------------------------------ the Service's part

    def endpoints(self) -> list[str]:
        """What the headless Service's name answers: `ip:port` of every ready pod not terminating."""
        with self._lock:
            return [
                f"{p.ip}:{self.server.grpc_port}" for p in self.pods if p.ready and not p.terminating and not p.gone
            ]

    # ------------------------------------------------------------ the kubelet's part

    def kill(self, target: Pod) -> float:
        """A node loss: SIGKILL to every container of the pod, then the pod removed (its IP gone);
        returns the time.monotonic() by which its containers were dead."""
        target.gone = True
        self.podman("pod", "kill", "--signal", "KILL", target.name)
        dead = time.monotonic()
        self.podman("pod", "rm", "--force", "--time", "0", target.name)
        return dead

    def terminate(self, target: Pod, before_sigterm: Callable[[], object] = lambda: None) -> Termination:
        """Delete a pod as the kubelet does: out of the Service at once, the preStop hook, then SIGTERM
        (`before_sigterm()` runs just before), and SIGKILL once terminationGracePeriodSeconds
        (counted from the start) have passed."""
        target.terminating = True
        container = self._container(target)
        started = time.monotonic()
        if self.server.pre_stop:
            self.podman("exec", container, *self.server.pre_stop, timeout=self.server.grace_s, check=False)
        pre_stop_s = time.monotonic() - started
        before_sigterm()
        remaining = max(1, round(self.server.grace_s - pre_stop_s))
        self.podman("stop", "--time", str(remaining), container, timeout=remaining + 60)
        stop_s = time.monotonic() - started - pre_stop_s
        exit_code = int(self.podman("inspect", "--format", "{{.State.ExitCode}}", container).strip())
        log = self.logs(target.name)
        self.podman("pod", "rm", "--force", "--time", "0", target.name)
        target.gone = True
        return Termination(target.name, pre_stop_s, stop_s, exit_code, log)

    def logs(self, pod_name: str) -> str:
        done = subprocess.run(
            ["podman", "logs", f"{pod_name}-{self.server.container}"],
            env=self.podman.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout + done.stderr

    def _container(self, target: Pod) -> str:
        return f"{target.name}-{self.server.container}"

    def _probe_loop(self) -> None:
        while not self._stop.wait(TICK_S):
            for target in self.live():
                if target.failure is None:
                    self._probe(target, time.monotonic())

    def _probe(self, target: Pod, now: float) -> None:
        """Run the pod's probes that are due: startup until it succeeds, then readiness and liveness."""
        if target.started_at is None:
            started = self._due(target, "startup", self.server.startup, now)
            if started:
                target.started_at = now
            elif started is False:
                self._check_running(target)
            if now - target.created > self.server.startup.period_s * self.server.startup.failure_threshold:
                target.failure = f"pod {target.name} failed its startup probe:\n{self.logs(target.name)}"
            return
        outcome = self._due(target, "readiness", self.server.readiness, now)
        if outcome is not None:
            target.ready = outcome
        alive = self._due(target, "liveness", self.server.liveness, now)
        if alive is False:
            self._check_running(target)
        if alive is not None:
            target.liveness_failures = 0 if alive else target.liveness_failures + 1
            if target.liveness_failures >= self.server.liveness.failure_threshold:
                target.liveness_restarts += 1
                target.liveness_failures = 0
                self.podman("restart", "--time", str(round(self.server.grace_s)), self._container(target))

    def _check_running(self, target: Pod) -> None:
        """After a failed probe: a container that exited on its own fails the run (with its log)
        where the kubelet would restart it in a loop."""
        state = self.podman("inspect", "--format", "{{.State.Status}}", self._container(target), check=False)
        if state.strip() not in ("running", "") and not (target.terminating or target.gone):
            target.failure = f"pod {target.name}'s container is {state.strip()}:\n{self.logs(target.name)}"

    def _due(self, target: Pod, name: str, probe: Probe, now: float) -> bool | None:
        """The probe's outcome if it was due (then schedules the next one), else None."""
        if now < target.due.get(name, now):
            return None
        target.due[name] = now + probe.period_s
        return check(f"{target.ip}:{probe.port}", probe.service, probe.timeout_s) == "SERVING"

    # ------------------------------------------------------------ set-up and clean-up

    def _make_secret(self, name: str) -> None:
        """The Secret the pods mount, as docs/deployment.md makes it (`kubectl create secret generic
        envhub-snapshot-key --from-literal=snapshot-key=<32 random bytes, base64>`), in podman's store."""
        values = {"snapshot-key": secrets.token_urlsafe(32)}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
            yaml.safe_dump(secret(name, values), handle)
        try:
            self.podman("secret", "create", name, handle.name)
        finally:
            os.unlink(handle.name)

    def _remove_leftovers(self) -> None:
        """Remove this Deployment's pods (by label) and its Secrets, from this run or an earlier one."""
        filters = [f"--filter=label={key}={value}" for key, value in self.server.labels.items()]
        for name in self.podman("pod", "ps", *filters, "--format", "{{.Name}}").split():
            self.podman("pod", "rm", "--force", "--time", "0", name, check=False)
        for name in self.server.secrets:  # podman keeps a secret volume's files in a volume of its name
            self.podman("secret", "rm", name, check=False)
            self.podman("volume", "rm", "--force", name, check=False)
