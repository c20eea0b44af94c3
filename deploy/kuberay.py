"""The oldest KubeRay operator a RayJob of this project needs, from the fields it uses (no dependencies).

A RayJob states the operator it needs in the annotation `envhub.dev/minimum-kuberay-version`;
`problems(resource, ray_version)` says where that falls short of a field it uses (`FIELDS`: the
KubeRay release that brought each `spec` field), of the Ray it runs (`FOR_RAY`), or where a `spec`
field has no known release yet (add it to `FIELDS` with the release notes' version).
deploy/validate_manifests.py runs it on every rendered RayJob.
"""

from __future__ import annotations

from typing import Any

ANNOTATION = "envhub.dev/minimum-kuberay-version"
FIELDS: dict[str, str] = {
    "entrypoint": "1.0.0",  # ray.io/v1 itself is KubeRay 1.0.0
    "rayClusterSpec": "1.0.0",
    "shutdownAfterJobFinishes": "1.0.0",
    "ttlSecondsAfterFinished": "1.0.0",
    "runtimeEnvYAML": "1.0.0",
    "submissionMode": "1.1.0",
    "activeDeadlineSeconds": "1.1.0",
}
"""RayJob `spec` fields and the KubeRay release that introduced each (KubeRay's release notes)."""
FOR_RAY: tuple[tuple[str, str], ...] = (("2.8.0", "1.1.1"),)
"""(Ray version, KubeRay version): from that Ray on, Ray's docs recommend at least that KubeRay."""


def version(text: str) -> tuple[int, ...]:
    """'1.1.1' -> (1, 1, 1); ValueError on anything else."""
    parts = text.strip().split(".")
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in parts)


def needed(resource: dict[str, Any], ray_version: str) -> tuple[str, str]:
    """(the KubeRay version the resource needs, why); ValueError for a spec field of unknown release."""
    spec = resource.get("spec", {})
    unknown = sorted(set(spec) - set(FIELDS))
    if unknown:
        raise ValueError(f"spec field(s) {unknown} have no known KubeRay release: add them to deploy/kuberay.py")
    reasons = [(FIELDS[field], f"spec.{field}") for field in spec]
    reasons += [(kuberay, f"Ray {ray_version}") for ray, kuberay in FOR_RAY if version(ray_version) >= version(ray)]
    return max(reasons, key=lambda reason: version(reason[0]))


def problems(resource: dict[str, Any], ray_version: str) -> list[str]:
    """Why the resource's minimum-KubeRay annotation is missing, malformed or too low (empty: it is right)."""
    stated = (resource.get("metadata", {}).get("annotations") or {}).get(ANNOTATION)
    if stated is None:
        return [f"no {ANNOTATION} annotation (the oldest KubeRay operator it runs on)"]
    try:
        least, reason = needed(resource, ray_version)
        if version(str(stated)) < version(least):
            return [f"{ANNOTATION} is {stated}, but {reason} needs KubeRay {least}"]
    except ValueError as error:
        return [str(error)]
    return []
