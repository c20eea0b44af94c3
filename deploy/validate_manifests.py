"""Validate rendered Kubernetes manifests offline, failing on anything not checked.

    python deploy/validate_manifests.py RENDERED.yaml [...] [--kubernetes-version 1.32 ...]

Core kinds are validated strictly against the Kubernetes OpenAPI schemas (kubernetes-validate).
A resource whose schema is unknown fails, except the custom resources listed in `CUSTOM`, which
get explicit checks instead: the ServiceMonitor must select a Service of the same render by its
labels and name one of its ports; a RayJob's pod templates are validated strictly as core
PodTemplates, its Ray version must be the one the trainer pins, and its minimum-KubeRay annotation must
cover every field it uses (deploy/kuberay.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kuberay  # deploy/kuberay.py, beside this script
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
Resource = dict[str, Any]


def ray_version() -> str:
    """The Ray version pyproject.toml pins for the trainer."""
    found = re.search(r'"ray\[default\]==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    if not found:
        raise SystemExit("pyproject.toml pins no ray[default] version")
    return found.group(1)


def name_of(resource: Resource) -> str:
    return f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"


def check_core(resource: Resource, version: str) -> list[str]:
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{name_of(resource)}: no schema for {resource.get('apiVersion')}"]
    except kubernetes_validate.ValidationError as error:
        return [f"{name_of(resource)}: {error.message} at {'/'.join(map(str, error.path))}"]
    return []


def check_service_monitor(resource: Resource, render: list[Resource], version: str) -> list[str]:
    spec = resource.get("spec", {})
    wanted = spec.get("selector", {}).get("matchLabels") or {}
    ports = [endpoint.get("port") for endpoint in spec.get("endpoints", [])]
    if not wanted or not ports:
        return [f"{name_of(resource)}: needs spec.selector.matchLabels and spec.endpoints[].port"]
    services = [
        r
        for r in render
        if r.get("kind") == "Service"
        and r["metadata"].get("namespace") == resource["metadata"].get("namespace")
        and wanted.items() <= (r["metadata"].get("labels") or {}).items()
    ]
    if not services:
        return [f"{name_of(resource)}: selects no Service of this render ({wanted})"]
    named = {port.get("name") for service in services for port in service["spec"].get("ports", [])}
    return [
        f"{name_of(resource)}: endpoint port {port!r} is not a port of {sorted(named)}"
        for port in ports
        if port not in named
    ]


def check_ray_job(resource: Resource, render: list[Resource], version: str) -> list[str]:
    spec = resource.get("spec", {})
    cluster = spec.get("rayClusterSpec", {})
    problems = []
    if not str(spec.get("entrypoint", "")).strip():
        problems.append(f"{name_of(resource)}: empty spec.entrypoint")
    if cluster.get("rayVersion") != ray_version():
        problems.append(
            f"{name_of(resource)}: rayVersion {cluster.get('rayVersion')!r}, the trainer pins {ray_version()}"
        )
    problems += [f"{name_of(resource)}: {p}" for p in kuberay.problems(resource, ray_version())]
    groups = [("head", cluster.get("headGroupSpec", {}))]
    groups += [(g.get("groupName", "?"), g) for g in cluster.get("workerGroupSpecs", [])]
    for group, body in groups:
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{group}"}}
        template["template"] = body.get("template", {})
        problems += [f"{name_of(resource)} {group} group: {p}" for p in check_core(template, version)]
    return problems


CUSTOM: dict[tuple[str, str], Callable[[Resource, list[Resource], str], list[str]]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): check_service_monitor,
    ("ray.io/v1", "RayJob"): check_ray_job,
}
"""Custom resources this project uses, and their explicit checks; any other unknown kind fails."""


def load(paths: list[Path]) -> Iterator[tuple[Path, list[Resource]]]:
    for path in paths:
        yield path, [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rendered", nargs="+", type=Path, help="output of `kubectl kustomize`")
    parser.add_argument("--kubernetes-version", action="append", dest="versions", help="default: 1.29 and 1.32")
    args = parser.parse_args(argv)
    problems: list[str] = []
    checked = 0
    for path, render in load(args.rendered):
        for version in args.versions or ["1.29", "1.32"]:
            for resource in render:
                custom = CUSTOM.get((resource.get("apiVersion", ""), resource.get("kind", "")))
                found = custom(resource, render, version) if custom else check_core(resource, version)
                problems += [f"{path}: {p} (Kubernetes {version})" for p in found]
                checked += 1
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{checked} resource checks, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
