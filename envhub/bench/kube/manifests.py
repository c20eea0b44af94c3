"""One server overlay's rendered kustomize output, adapted for `podman kube play` (podman 4.3).

`render(overlay)` is `kubectl kustomize overlay`; `adapt(documents)` keeps what podman can play,
changes only what it cannot take, and says what and why (`Adaptation`). What podman lacks, the
harness does itself with the manifests' own values (`envhub.bench.kube.cluster`): the ReplicaSet
(pods named `<deployment>-<template hash>-<suffix>`, replaced, rolled), the kubelet's gRPC probes
and pod termination (preStop hook, SIGTERM, grace period), and the headless Service's answer
(the ready pods' addresses).
"""

from __future__ import annotations

import copy
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Document = dict[str, Any]

NOT_PODS = {
    "HorizontalPodAutoscaler": "not a pod: the replica count stays the Deployment's (the HPA's minimum)",
    "PodDisruptionBudget": "not a pod: the rolling restart takes one replica at a time, within its maxUnavailable",
    "NetworkPolicy": "not a pod: podman's pod network enforces no policy (the servers need none to run)",
    "ServiceMonitor": "not a pod: no Prometheus scrapes here (the pods' /metrics stay served)",
}
"""Kinds of the render that are no pods, dropped, and what stands in for each."""


@dataclass(frozen=True)
class Adaptation:
    """One change between the render and what is played."""

    what: str
    why: str


@dataclass(frozen=True)
class Probe:
    """A container's gRPC probe, as the kubelet runs it: `grpc.health.v1.Health/Check` of `service`."""

    port: int
    service: str
    period_s: float
    timeout_s: float
    failure_threshold: int

    @classmethod
    def of(cls, spec: Document, ports: dict[str, int]) -> Probe:
        """The probe `spec` (a container's startupProbe, readinessProbe or livenessProbe), with
        Kubernetes' defaults; a named port resolved through the container's `ports`."""
        if set(spec) & {"exec", "httpGet", "tcpSocket"} or "grpc" not in spec:
            raise ValueError(f"only gRPC probes are run here, not {sorted(spec)}")
        port = spec["grpc"]["port"]
        return cls(
            port=ports[port] if isinstance(port, str) else int(port),
            service=spec["grpc"].get("service", ""),
            period_s=float(spec.get("periodSeconds", 10)),
            timeout_s=float(spec.get("timeoutSeconds", 1)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
        )


@dataclass(frozen=True)
class Server:
    """What the harness plays of one Deployment and its headless Service."""

    name: str
    """The Deployment's name (`envhub-searchqa`); its pods are `<name>-<template hash>-<suffix>`."""
    replicas: int
    max_surge: int
    max_unavailable: int
    labels: dict[str, str]
    """The pod template's labels (the Service's selector picks them)."""
    pod_spec: Document
    """The pod template's spec as played (`adapt`'s changes made)."""
    container: str
    image: str
    startup: Probe
    readiness: Probe
    liveness: Probe
    pre_stop: tuple[str, ...]
    """The container's preStop exec command, run before SIGTERM."""
    grace_s: float
    """terminationGracePeriodSeconds: preStop and the drain together, then SIGKILL."""
    service: str
    grpc_port: int
    """The port the Service's gRPC port targets on each pod."""
    secrets: tuple[str, ...]
    """Names of the Secrets the pods mount (the harness makes them, as `kubectl create secret` would)."""
    adaptations: tuple[Adaptation, ...]


def render(overlay: Path) -> list[Document]:
    """`kubectl kustomize overlay`, as documents."""
    done = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay} failed: {done.stderr.strip()}")
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def adapt(documents: list[Document], registry: str = "localhost") -> Server:
    """The one Deployment and headless Service of a server overlay's render, ready to play with
    podman; images come from `registry` (podman's local store: what `deploy/docker/build.sh` made)."""
    kinds = [document["kind"] for document in documents]
    unknown = set(kinds) - {"Deployment", "Service", *NOT_PODS}
    if unknown or kinds.count("Deployment") != 1 or kinds.count("Service") != 1:
        raise ValueError(f"expected one Deployment, one Service and {sorted(NOT_PODS)}; the render has {kinds}")
    deployment = next(document for document in documents if document["kind"] == "Deployment")
    service = next(document for document in documents if document["kind"] == "Service")
    adaptations = [
        Adaptation(f"{kind} {_name(document)} dropped", NOT_PODS[kind]) for kind, document in _not_pods(documents)
    ]

    template = deployment["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    containers = spec["containers"]
    if len(containers) != 1:
        raise ValueError(f"a server pod has one container, not {len(containers)}")
    container = containers[0]
    ports = {port["name"]: int(port["containerPort"]) for port in container.get("ports", [])}
    adaptations += _adapt_container(container, registry)
    adaptations += _adapt_volumes(spec)
    labels = dict(template["metadata"]["labels"])
    grpc_port = _service_port(service, labels, ports)
    adaptations.append(
        Adaptation(
            f"Service {_name(service)} emulated: its answer is the ready pods' {grpc_port} on the pod network",
            "podman implements no Service; as a headless Service's DNS name does, the harness answers the "
            "addresses of the pods its selector picks that pass the readiness probe and are not terminating",
        )
    )
    adaptations.append(
        Adaptation(
            f"Deployment {_name(deployment)} played as one Pod per replica, its controller run by the harness",
            "podman has no controllers (it plays a Deployment's replicas once, as <name>-pod-<i>): the harness "
            "names, replaces and rolls the pods per the Deployment's strategy, as its ReplicaSets would",
        )
    )
    adaptations.append(
        Adaptation(
            "gRPC probes, the preStop hook and terminationGracePeriodSeconds run by the harness",
            "podman 4.3 ignores gRPC probes and lifecycle hooks: the harness probes each pod's "
            "grpc.health.v1 as the kubelet does and terminates pods as it does (out of the Service, "
            "preStop, SIGTERM, SIGKILL at the end of the grace period)",
        )
    )
    strategy = deployment["spec"].get("strategy", {}).get("rollingUpdate", {})
    return Server(
        name=_name(deployment),
        replicas=int(deployment["spec"].get("replicas", 1)),
        max_surge=int(strategy.get("maxSurge", 1)),
        max_unavailable=int(strategy.get("maxUnavailable", 0)),
        labels=labels,
        pod_spec=spec,
        container=container["name"],
        image=container["image"],
        startup=Probe.of(container["startupProbe"], ports),
        readiness=Probe.of(container["readinessProbe"], ports),
        liveness=Probe.of(container["livenessProbe"], ports),
        pre_stop=tuple(container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ())),
        grace_s=float(spec.get("terminationGracePeriodSeconds", 30)),
        service=_name(service),
        grpc_port=grpc_port,
        secrets=tuple(volume["secret"]["secretName"] for volume in spec.get("volumes", []) if "secret" in volume),
        adaptations=tuple(adaptations),
    )


def pod(server: Server, name: str, template_hash: str) -> Document:
    """The Pod manifest of one replica named `name`, as its ReplicaSet would make it: the template's
    labels plus `pod-template-hash`; then `$(VAR)` references in command and args expanded (the
    kubelet does that; podman 4.3 passes them on verbatim, so every replica would get the
    same literal `--replica-id $(POD_NAME)`) and emptyDir volumes named after the pod (see `adapt`)."""
    spec = copy.deepcopy(server.pod_spec)
    own = {volume["name"]: f"{name}-{volume['name']}" for volume in spec.get("volumes", []) if "emptyDir" in volume}
    for volume in spec.get("volumes", []):
        volume["name"] = own.get(volume["name"], volume["name"])
    for container in spec["containers"]:
        for mount in container.get("volumeMounts", []):
            mount["name"] = own.get(mount["name"], mount["name"])
        values = _env_values(container, name)
        for key in ("command", "args"):
            if key in container:
                container[key] = [expand_references(argument, values) for argument in container[key]]
    labels = {**server.labels, "pod-template-hash": template_hash}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def secret(name: str, values: dict[str, str]) -> Document:
    """The Secret `kubectl create secret generic name --from-literal=key=value` makes, as podman 4.3
    takes it: it ignores `stringData` and writes `data` values to the volume's files as they are
    (no base64 decoding), so `data` holds the values themselves."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "data": values}


def _adapt_container(container: Document, registry: str) -> list[Adaptation]:
    adaptations = []
    image = container["image"]
    if not image.startswith(f"{registry}/"):
        container["image"] = f"{registry}/{image}"
        adaptations.append(
            Adaptation(
                f"image {image} -> {container['image']}, imagePullPolicy {container.get('imagePullPolicy')} -> Never",
                "no registry here: the images are deploy/docker/build.sh's, in podman's local store "
                "(docs/deployment.md: set each overlay's images: to where the cluster pulls from)",
            )
        )
    container["imagePullPolicy"] = "Never"
    if container.pop("ports", None):
        adaptations.append(
            Adaptation(
                "the container's ports list removed (its names still resolve the probes and the Service)",
                "podman 4.3 publishes every containerPort on the host at the same port (two replicas collide "
                "on 50051, open on every interface); in Kubernetes it is informational: pods are reached on "
                "their pod-network IP, as here",
            )
        )
    if any("$(" in argument for argument in container.get("command", []) + container.get("args", [])):
        adaptations.append(
            Adaptation(
                "$(VAR) references in args expanded per pod (--replica-id $(POD_NAME) -> the pod's name)",
                "the kubelet expands them from the container's env; podman 4.3 passes them on verbatim",
            )
        )
    return adaptations


def _adapt_volumes(spec: Document) -> list[Adaptation]:
    adaptations = []
    for volume in spec.get("volumes", []):
        if "emptyDir" in volume:
            adaptations.append(
                Adaptation(
                    f"emptyDir volume {volume['name']} named after its pod (<pod>-{volume['name']})",
                    "podman 4.3 makes an emptyDir a named volume of the volume's name, shared by every pod "
                    "that has one of that name (a file one replica writes in /tmp appears in the other's)",
                )
            )
        source = volume.get("secret")
        if source is not None and "optional" not in source:
            source["optional"] = False
            adaptations.append(
                Adaptation(
                    f"secret volume {volume['name']}: optional: false written out (Kubernetes' default)",
                    "podman 4.3.1 dereferences an unset optional and crashes (nil pointer in VolumeFromSecret)",
                )
            )
    return adaptations


def _service_port(service: Document, labels: dict[str, str], ports: dict[str, int]) -> int:
    """The pod port the Service's gRPC port targets; the Service must be headless and select the pods."""
    spec = service["spec"]
    if spec.get("clusterIP") != "None":
        raise ValueError(f"Service {_name(service)} is not headless: only a headless Service's answer is emulated")
    selector = spec.get("selector", {})
    if not selector or any(labels.get(key) != value for key, value in selector.items()):
        raise ValueError(f"Service {_name(service)} selects {selector}, not the pods (labels {labels})")
    grpc = next((port for port in spec["ports"] if port.get("name") == "grpc"), None)
    if grpc is None:
        raise ValueError(f"Service {_name(service)} has no port named grpc")
    target = grpc.get("targetPort", grpc["port"])
    return ports[target] if isinstance(target, str) else int(target)


def _not_pods(documents: list[Document]) -> list[tuple[str, Document]]:
    return [(document["kind"], document) for document in documents if document["kind"] in NOT_PODS]


def _name(document: Document) -> str:
    return str(document["metadata"]["name"])


def _env_values(container: Document, pod_name: str) -> dict[str, str]:
    """The container's env values the kubelet knows before start: literal values and the pod's name."""
    values = {}
    for variable in container.get("env", []):
        if "value" in variable:
            values[variable["name"]] = str(variable["value"])
        elif variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            values[variable["name"]] = pod_name
    return values


REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand_references(argument: str, values: dict[str, str]) -> str:
    """Kubernetes' expansion: `$(NAME)` of a known variable is replaced, `$$` is `$`, others stay."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return values.get(match.group(1), match.group(0))

    return REFERENCE.sub(one, argument)
