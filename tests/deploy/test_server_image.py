"""Build the ScienceWorld server image with podman, run it, and check it from outside with grpcurl.

Slow (a first build takes minutes; later ones reuse podman's cached layers). Needs what .ci/run
installs: podman, buildah, runc, debootstrap, and grpcurl in deploy/check.sh's venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/envhub-scienceworld:test"
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "deploy/docker/containers.conf")}

PORTS = ("-p", "127.0.0.1::50051", "-p", "127.0.0.1::9090")
"""gRPC and /metrics on loopback ports that podman picks."""

pytestmark = pytest.mark.slow


def tool(name: str) -> str:
    venv = Path(os.environ.get("DEPLOY_VENV", ROOT / ".venv-deploy")) / "bin" / name
    found = str(venv) if venv.exists() else shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return found


def run(*command: str, timeout: float = 60) -> str:
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def image() -> str:
    tool("podman")
    tool("debootstrap")
    run(str(ROOT / "deploy/docker/build.sh"), "scienceworld", timeout=1500)
    run(tool("podman"), "tag", "localhost/envhub-scienceworld:0.1.0", IMAGE)
    return IMAGE


@pytest.fixture
def container(image: str) -> Iterator[tuple[str, str, str]]:
    """A running container (read-only root and a /tmp, as on Kubernetes): (name, gRPC target, metrics URL)."""
    podman, name = tool("podman"), f"envhub-test-{uuid.uuid4().hex[:8]}"
    run(podman, "run", "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp", *PORTS, image)
    try:
        ports = dict(line.split(" -> ") for line in run(podman, "port", name).splitlines())
        grpc_port = ports["50051/tcp"].rsplit(":", 1)[1]
        metrics_port = ports["9090/tcp"].rsplit(":", 1)[1]
        yield name, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{metrics_port}/metrics"
    finally:
        subprocess.run([podman, "rm", "--force", "--time", "5", name], env=ENV, capture_output=True, timeout=60)


def grpcurl(target: str, method: str, request: dict[str, object] | None = None) -> dict[str, object]:
    command = [tool("grpcurl"), "-plaintext", "-max-time", "60"]
    if request is not None:
        command += ["-d", json.dumps(request)]
    return json.loads(run(*command, target, method, timeout=90))  # type: ignore[no-any-return]


def logs(name: str) -> str:
    done = subprocess.run([tool("podman"), "logs", name], env=ENV, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def wait_serving(name: str, target: str) -> None:
    """Poll the health check the way an orchestrator does, until the workers are up."""
    for _ in range(120):
        done = subprocess.run(
            [tool("grpcurl"), "-plaintext", "-max-time", "2", target, "grpc.health.v1.Health/Check"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode == 0 and json.loads(done.stdout).get("status") == "SERVING":
            return
        state = run(tool("podman"), "inspect", "--format", "{{.State.Status}}", name).strip()
        assert state == "running", logs(name)
        subprocess.run(["sleep", "1"], check=True)
    pytest.fail("the server never answered SERVING")


def test_image_serves_scienceworld_as_non_root_and_drains_on_stop(container: tuple[str, str, str]) -> None:
    name, target, metrics_url = container
    podman = tool("podman")
    wait_serving(name, target)
    assert run(podman, "exec", name, "id", "-u").strip() == "10001"
    # the image's own HEALTHCHECK (the docker image format keeps it)
    run(podman, "healthcheck", "run", name)

    services = run(tool("grpcurl"), "-plaintext", target, "list").split()
    assert {"envhub.v1.EnvHub", "grpc.health.v1.Health"} <= set(services)
    start = grpcurl(
        target, "envhub.v1.EnvHub/CreateSession", {"environment": "scienceworld", "task": {"task_id": "boil/0"}}
    )
    assert "hallway" in start["observation"]["text"]  # type: ignore[index]
    step = grpcurl(target, "envhub.v1.EnvHub/Step", {"session_id": start["session_id"], "action": "look around"})
    assert "hallway" in step["result"]["observation"]["text"]  # type: ignore[index]
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        exposition = reply.read().decode()
    assert 'envhub_sessions{environment="scienceworld",tenant="default"} 1.0' in exposition
    assert 'envhub_steps_total{environment="scienceworld",tenant="default"} 1.0' in exposition

    run(podman, "stop", "--time", "40", name, timeout=90)  # SIGTERM: drain, then exit 0
    assert run(podman, "inspect", "--format", "{{.State.ExitCode}}", name).strip() == "0"
    assert "draining" in logs(name) and logs(name).rstrip().endswith("stopped")
