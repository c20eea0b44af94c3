"""What `envhub bench --profile kube` plays of each server overlay, and what it changes for podman.

Fast (kubectl only): the changes `envhub.bench.kube.manifests.adapt` makes to the real renders, the
per-pod manifest (its replica id, its own emptyDir), and the renders it refuses to emulate.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from envhub.bench.kube.manifests import NOT_PODS, Probe, adapt, expand_references, pod, render, secret

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ("alfworld", "scienceworld", "searchqa", "webshop")


def rendered(overlay: str) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing (CI installs it: see .ci/run)")
        pytest.skip("kubectl is not installed")
    return render(ROOT / "deploy/k8s/overlays" / overlay)


@pytest.mark.parametrize("environment", SERVERS)
def test_each_server_overlay_is_played_with_its_own_probes_drain_and_service(environment: str) -> None:
    documents = rendered(environment)
    server = adapt(documents)

    assert server.name == f"envhub-{environment}" and server.service == server.name
    assert (server.replicas, server.max_surge, server.max_unavailable) == (2, 1, 0)
    assert server.grpc_port == 50051
    assert server.readiness == Probe(50051, "", 5.0, 3.0, 1)
    assert server.startup.port == 50051 and server.startup.failure_threshold == 36
    assert server.liveness.service == "envhub.v1.EnvHub"
    assert server.pre_stop == ("sleep", "5") and server.grace_s == 60.0
    assert server.secrets == ("envhub-snapshot-key",)
    dropped = [a.what.split()[0] for a in server.adaptations if a.what.endswith("dropped")]
    assert sorted(dropped) == sorted(NOT_PODS)

    container = server.pod_spec["containers"][0]
    assert container["image"] == f"localhost/envhub-{environment}:0.1.0"
    assert container["imagePullPolicy"] == "Never"
    assert "ports" not in container, "podman 4.3 would publish them on the host"
    assert all(v["secret"]["optional"] is False for v in server.pod_spec["volumes"] if "secret" in v)
    # the render itself is left as it was
    original = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert original["image"] == f"envhub-{environment}:0.1.0" and original["ports"]


def test_each_pod_gets_its_name_as_replica_id_and_an_emptydir_of_its_own() -> None:
    server = adapt(rendered("searchqa"))
    first, second = (pod(server, f"envhub-searchqa-abc-{n}", "abc") for n in ("11111", "22222"))

    for manifest, name in ((first, "envhub-searchqa-abc-11111"), (second, "envhub-searchqa-abc-22222")):
        assert manifest["kind"] == "Pod" and manifest["metadata"]["name"] == name
        assert manifest["metadata"]["labels"] == {
            "app.kubernetes.io/name": "envhub-searchqa",
            "app.kubernetes.io/component": "server",
            "pod-template-hash": "abc",
        }
        container = manifest["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--replica-id") + 1] == name
        assert not any("$(" in argument for argument in args)
        volumes = {volume["name"]: volume for volume in manifest["spec"]["volumes"]}
        assert "emptyDir" in volumes[f"{name}-tmp"] and "secret" in volumes["snapshot-key"]
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        assert mounts == {"/tmp": f"{name}-tmp", "/var/run/secrets/envhub": "snapshot-key"}
    assert "$(POD_NAME)" in server.pod_spec["containers"][0]["args"], "the template keeps its reference"


def test_references_expand_as_the_kubelet_expands_them() -> None:
    assert expand_references("$(A)-$$(A)-$(B)-$A", {"A": "x"}) == "x-$(A)-$(B)-$A"


def test_the_secret_holds_the_values_themselves_as_podman_writes_them() -> None:
    assert secret("envhub-snapshot-key", {"snapshot-key": "k3y"})["data"] == {"snapshot-key": "k3y"}


def test_renders_it_cannot_emulate_are_refused() -> None:
    documents = rendered("searchqa")
    with pytest.raises(ValueError, match="RayJob"):
        adapt(rendered("trainer"))

    not_headless = copy.deepcopy(documents)
    next(d for d in not_headless if d["kind"] == "Service")["spec"]["clusterIP"] = "10.0.0.7"
    with pytest.raises(ValueError, match="not headless"):
        adapt(not_headless)

    elsewhere = copy.deepcopy(documents)
    next(d for d in elsewhere if d["kind"] == "Service")["spec"]["selector"] = {"app.kubernetes.io/name": "other"}
    with pytest.raises(ValueError, match="not the pods"):
        adapt(elsewhere)

    exec_probe = copy.deepcopy(documents)
    container = next(d for d in exec_probe if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"] = {"exec": {"command": ["true"]}}
    with pytest.raises(ValueError, match="only gRPC probes"):
        adapt(exec_probe)
