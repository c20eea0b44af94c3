"""The rendered Kubernetes overlays agree with the server and the images they run.

deploy/check.sh validates the manifests against the Kubernetes schemas and checkov; these tests
check what no schema knows: the container arguments parse as `envhub serve` flags, the probes,
Service and ServiceMonitor name the ports the server listens on, the snapshot key file lies in
the mounted Secret, the drain fits the grace period, and the HPA's session target fits the limit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from envhub.cli import _parser
from envhub.core.registry import KINDS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/k8s"
ENVIRONMENT_OVERLAYS = sorted(path.name for path in (K8S / "overlays").iterdir() if path.name in KINDS)


def render(directory: Path) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing (CI installs it: see .ci/run)")
        pytest.skip("kubectl is not installed")
    out = subprocess.run(["kubectl", "kustomize", str(directory)], check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(resources: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [r for r in resources if r["kind"] == kind]
    return found


def entrypoint_args(environment: str) -> list[str]:
    """The `envhub serve ...` flags of the server image's ENTRYPOINT, built for `environment`."""
    dockerfile = (ROOT / "deploy/docker/Dockerfile").read_text().splitlines()
    line = next(li for li in dockerfile if li.startswith("ENTRYPOINT"))
    shell, dash_c, script, _name = json.loads(line.removeprefix("ENTRYPOINT"))
    assert (shell, dash_c) == ("/bin/sh", "-c")
    words = shlex.split(script)
    assert words[:3] == ["exec", "envhub", "serve"] and words[-1] == "$@"
    return [environment if word == "$ENVHUB_ENVIRONMENT" else word for word in words[3:-1]]


def test_every_environment_has_an_overlay_and_pinned_image_requirements() -> None:
    assert set(ENVIRONMENT_OVERLAYS) == set(KINDS)
    for environment in KINDS:
        pins = (ROOT / "deploy/docker/requirements" / f"{environment}.txt").read_text().splitlines()
        assert pins[1] == "-r server.txt" and all("==" in line for line in pins[2:]), environment


@pytest.mark.parametrize("environment", ENVIRONMENT_OVERLAYS)
def test_overlay_matches_the_server(environment: str) -> None:
    resources = render(K8S / "overlays" / environment)
    deployment, service, hpa = (
        one(resources, "Deployment"),
        one(resources, "Service"),
        one(resources, "HorizontalPodAutoscaler"),
    )
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = _parser().parse_args(["serve", *entrypoint_args(environment), *container["args"]])
    assert args.env == [environment]
    assert container["image"].startswith(f"envhub-{environment}:")

    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"grpc": args.port, "metrics": args.metrics_port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == args.port

    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None", "clients need every replica's address (headless)"
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports)
    assert one(resources, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert one(resources, "ServiceMonitor")["spec"]["endpoints"][0]["port"] in ports

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [key_volume] = [v for v in pod["volumes"] if "secret" in v]
    [item] = key_volume["secret"]["items"]
    assert args.snapshot_key_file == f"{mounts[key_volume['name']]}/{item['path']}"
    assert args.replica_id == "$(POD_NAME)" and container["env"][0]["name"] == "POD_NAME"

    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + args.drain_grace + args.drain_migrate
    assert args.drain_migrate > 0, "clients get a window to move sessions off a draining replica"
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    [sessions] = [m for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    assert sessions["pods"]["metric"]["name"] == "envhub_sessions"
    assert int(sessions["pods"]["target"]["averageValue"]) < args.max_sessions


def test_everything_renders_with_the_dashboard_and_trainer() -> None:
    resources = render(K8S)
    dashboard = one(resources, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (K8S / "base/monitoring/envhub-dashboard.json").read_text()
    assert json.loads(dashboard["data"]["envhub-dashboard.json"]) == json.loads(shipped)
    job = one(resources, "RayJob")
    targets = re.search(r"env\.targets=\[\"dns:///([^\"]+)\"\]", job["spec"]["entrypoint"])
    assert targets, job["spec"]["entrypoint"]
    services = {
        f"{r['metadata']['name']}.{r['metadata']['namespace']}.svc.cluster.local:{r['spec']['ports'][0]['port']}"
        for r in resources
        if r["kind"] == "Service"
    }
    assert targets.group(1) in services
    assert "env.failover_snapshot_every=" in job["spec"]["entrypoint"], "rollouts survive a replica draining or dying"
    assert {r["metadata"].get("namespace") for r in resources if r["kind"] != "Namespace"} == {"envhub"}


def _kuberay() -> Any:
    """deploy/kuberay.py (a script's helper module, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kuberay", ROOT / "deploy/kuberay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entrypoint_settings(job: dict[str, Any]) -> dict[str, str]:
    words = shlex.split(job["spec"]["entrypoint"])
    return dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--set")


def test_the_rayjob_keeps_models_and_outputs_on_claims() -> None:
    resources = render(K8S / "overlays/trainer")
    job = one(resources, "RayJob")
    claims = {r["metadata"]["name"]: r for r in resources if r["kind"] == "PersistentVolumeClaim"}
    assert set(claims) == {"envhub-trainer-models", "envhub-trainer-outputs"}
    assert all(claim["spec"]["accessModes"] == ["ReadWriteMany"] for claim in claims.values())
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]]
    pods += [group["template"]["spec"] for group in cluster["workerGroupSpecs"]]
    for pod in pods:  # the driver (head) and the learners and engines (GPU workers) see both
        volumes = {v["name"]: v.get("persistentVolumeClaim", {}) for v in pod["volumes"]}
        [container] = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert volumes[mounts["/models"]["name"]]["claimName"] == "envhub-trainer-models"
        assert mounts["/models"]["readOnly"] and volumes[mounts["/models"]["name"]]["readOnly"]
        assert volumes[mounts["/outputs"]["name"]]["claimName"] == "envhub-trainer-outputs"
        assert not mounts["/outputs"].get("readOnly") and pod["securityContext"]["fsGroup"] == 10001
    settings = _entrypoint_settings(job)
    assert settings["output_dir"].startswith("/outputs/")
    config = yaml.safe_load((ROOT / "trainer/configs/gpu-vllm.yaml").read_text())
    assert all(str(path).startswith("/models/") for path in config["models"].values() if path)


def test_the_rayjob_states_the_kuberay_it_needs_and_the_lint_checks_it() -> None:
    kuberay = _kuberay()
    job = one(render(K8S / "overlays/trainer"), "RayJob")
    ray = job["spec"]["rayClusterSpec"]["rayVersion"]
    assert kuberay.problems(job, ray) == []
    assert job["metadata"]["annotations"][kuberay.ANNOTATION] == "1.1.1"
    older = {**job, "metadata": {**job["metadata"], "annotations": {kuberay.ANNOTATION: "1.0.0"}}}
    assert kuberay.problems(older, ray) == [f"{kuberay.ANNOTATION} is 1.0.0, but Ray {ray} needs KubeRay 1.1.1"]
    old_ray = kuberay.problems(older, "2.7.0")
    assert len(old_ray) == 1 and "spec." in old_ray[0] and "needs KubeRay 1.1.0" in old_ray[0]
    unknown = {**job, "spec": {**job["spec"], "deletionStrategy": {}}}
    assert "deletionStrategy" in kuberay.problems(unknown, ray)[0]
    unstated = {**job, "metadata": {"name": job["metadata"]["name"]}}
    assert "no envhub.dev/minimum-kuberay-version" in kuberay.problems(unstated, ray)[0]
