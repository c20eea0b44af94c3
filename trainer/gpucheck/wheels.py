"""What `make gpu-check` needs beyond the lent GPU machine's image, and the small wheels it brings.

The machine (GPU-FACTS section 8) has Python 3.12, torch 2.11, transformers and the rest of `IMAGE`, no
network, and takes at most 64 MiB of files per command. `NEEDS` lists every distribution the check imports
that is not the standard library: the ones the image must have (`version` None: never carried; torch
above all, which is never replaced) and the ones carried as cp312 manylinux wheels when the image lacks
them or has them too old. Standard library only: this module runs before anything is installed.

    python -m trainer.gpucheck.wheels download .gpu-wheels     # here, beforehand (`make gpu-wheels`)

`plan` decides, from the versions the image reports, what to bring and why; `install` puts the chosen
wheels in a folder with `pip install --no-index --no-deps --target` (the folder then goes first on
PYTHONPATH): one pip call per group of wheels that the same stages need (`Need.stages`), and when a group's
call fails, one call per wheel of that group, so a wheel that does not install costs only the stages that
import it (`blocked_stages`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

CARRY_LIMIT_BYTES = 48 * 1024 * 1024
"""Most bytes of wheels: 64 MiB travel per command, the rest is the repository (about 4 MiB) and headroom."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PYTHON = "3.12"


@dataclass(frozen=True)
class Need:
    """One distribution the check imports (its name as pip knows it)."""

    dist: str
    minimum: str
    """Lowest version that works (inclusive); "0": any."""
    why: str
    version: str | None = None
    """The version carried as a wheel; None: never carried, the image must have it."""
    lead: str | None = None
    """When this other need is brought, this one is brought too unless the image has exactly `version`
    (pydantic-core pinned by the pydantic we bring; protobuf's generated code beside the protobuf we bring)."""
    build: bool = False
    """No binary wheel exists on PyPI: `pip wheel` builds it here from the sdist (a py3-none-any wheel)."""
    stages: tuple[str, ...] | None = None
    """The gpu-check stages that import it; None: every stage."""


PYDANTIC = ("throughput", "learner", "fsdp", "ipc", "train")
"""The stages that import `trainer.config` (all but hf)."""
GRPC = ("throughput", "fsdp", "ipc", "hf", "train")
"""The stages that import envhub's gRPC client (`trainer.workers` for the process group, `envhub.client.formats`;
all but learner; `python -X importtime` of each stage on CPU)."""
TRAIN = ("train",)
"""The stage that runs an envhub ALFWorld server and the training driver."""

NEEDS: tuple[Need, ...] = (
    Need("torch", "2.11", "learner, FSDP2, DCP, CUDA IPC (never carried, never replaced)"),
    Need("transformers", "5.16.1", "the models ([trainer] extra's lower bound)"),
    Need("tokenizers", "0.21", "tiny tokenizers"),
    Need("safetensors", "0.4", "model folders"),
    Need("numpy", "1.26", "torch, textworld"),
    Need("pyyaml", "6", "configs"),
    Need("tqdm", "4.66", "driver progress"),
    Need("tensorboard", "2.16", "metrics", stages=TRAIN),
    Need("matplotlib", "3.8", "the training plot", stages=TRAIN),
    Need("prometheus-client", "0.20", "server metrics", stages=TRAIN),
    Need("networkx", "2", "textworld", stages=TRAIN),
    Need("pydantic", "2.7", "trainer config", "2.14.4", stages=PYDANTIC),
    Need("pydantic-core", "0", "pydantic's own pin", "2.50.5", lead="pydantic", stages=PYDANTIC),
    Need("annotated-types", "0.6.0", "pydantic", "0.8.0", lead="pydantic", stages=PYDANTIC),
    Need("typing-inspection", "0.4.4", "pydantic", "0.4.5", lead="pydantic", stages=PYDANTIC),
    Need("typing-extensions", "4.16.0", "pydantic, grpcio", "4.16.0"),
    Need("grpcio", "1.85.1", "envhub/v1's generated code (GRPC_GENERATED_VERSION)", "1.85.3", stages=GRPC),
    Need("protobuf", "7.35.1", "envhub/v1's generated code (gencode 7.35.1)", "7.36.2", stages=GRPC),
    Need("googleapis-common-protos", "1.5.5", "grpcio-status", "1.76.0", lead="protobuf", stages=GRPC),
    Need("grpcio-status", "1.85.1", "error details (envhub.core.status)", "1.85.3", lead="protobuf", stages=GRPC),
    Need("grpcio-health-checking", "1.85.1", "envhub server", "1.85.1", lead="protobuf", stages=GRPC),
    Need("grpcio-reflection", "1.85.1", "envhub server", "1.85.1", lead="protobuf", stages=GRPC),
    Need("alfworld", "0.4.2", "the ALFWorld server of the training run", "0.4.2", stages=TRAIN),
    Need("textworld", "1.7.0", "ALFWorld's engine", "1.7.0", stages=TRAIN),
    Need("fast-downward-textworld", "20.6.4", "ALFWorld's planner", "20.6.4", build=True, stages=TRAIN),
    Need("jericho", "3.3.0", "textworld", "3.3.1", build=True, stages=TRAIN),
    Need("tatsu", "5.8.3", "textworld's grammar", "5.8.3", stages=TRAIN),
    Need("hashids", "1.2.0", "textworld", "1.3.1", stages=TRAIN),
    Need("mementos", "1.3.1", "textworld", "1.3.1", stages=TRAIN),
    Need("more-itertools", "0", "textworld", "11.2.1", stages=TRAIN),
    Need("prompt-toolkit", "0", "textworld", "3.0.53", stages=TRAIN),
    Need("wcwidth", "0.1.4", "prompt-toolkit", "0.9.4", stages=TRAIN),
    Need("termcolor", "0", "textworld, jericho", "3.3.0", stages=TRAIN),
)


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string ("2.11.0+cu130" -> (2, 11, 0))."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in match[0].split(".")) if match else ()


def older(version: str, minimum: str) -> bool:
    """Whether `version` is below `minimum` (releases compared numerically, missing parts as 0)."""
    a, b = release(version), release(minimum)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) < b + (0,) * (width - len(b))


@dataclass(frozen=True)
class Decision:
    """What to do about one need on this image."""

    need: Need
    installed: str | None
    action: str
    """"ok" (the image's will do), "bring" (install the carried wheel) or "unmet" (missing, not carried)."""
    reason: str


def plan(installed: Mapping[str, str | None], needs: Sequence[Need] = NEEDS) -> list[Decision]:
    """The decision for every need, given the image's versions (`installed[dist]`, None when absent)."""
    brought: set[str] = set()
    decisions: list[Decision] = []
    for need in needs:
        have = installed.get(need.dist)
        reason = ""
        if have is None:
            reason = "missing"
        elif older(have, need.minimum):
            reason = f"image has {have} < {need.minimum}"
        elif need.lead in brought and have != need.version:
            reason = f"image has {have}; the {need.lead} brought goes with {need.version}"
        if not reason:
            decisions.append(Decision(need, have, "ok", f"image has {have}"))
        elif need.version is None:
            decisions.append(Decision(need, have, "unmet", f"{reason}; needs >= {need.minimum} ({need.why})"))
        else:
            brought.add(need.dist)
            decisions.append(Decision(need, have, "bring", reason))
    return decisions


def image_versions(needs: Sequence[Need] = NEEDS) -> dict[str, str | None]:
    """The version of each need this interpreter sees (None when not installed)."""
    versions: dict[str, str | None] = {}
    for need in needs:
        try:
            versions[need.dist] = metadata.version(need.dist)
        except metadata.PackageNotFoundError:
            versions[need.dist] = None
    return versions


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel_key(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return _normal(name), version


def wheel_for(need: Need, folder: Path) -> Path:
    """The carried wheel of `need` in `folder` (FileNotFoundError naming the make target when absent)."""
    matches = [p for p in folder.glob("*.whl") if _wheel_key(p) == (_normal(need.dist), need.version)]
    if len(matches) != 1:
        raise FileNotFoundError(
            f"{folder} holds {len(matches)} wheels of {need.dist} {need.version} (one needed): "
            "run `make gpu-wheels` here first and carry the folder"
        )
    return matches[0]


@dataclass
class Installed:
    """What `install` did: the wheels now in the target, the needs that could not be installed and why, and
    pip's output."""

    wheels: list[Path] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)


def install(decisions: Sequence[Decision], folder: Path, target: Path, *, timeout_s: float = 300.0) -> Installed:
    """Install the wheels of every "bring" decision into `target` (no index, no dependencies): one pip call per
    group of needs with the same `stages`; a group whose call fails is installed wheel by wheel, so only the
    wheels that fail (or are absent from `folder`) are reported. `timeout_s` bounds the whole install."""
    deadline = time.monotonic() + timeout_s
    result = Installed()
    groups: dict[tuple[str, ...] | None, list[tuple[Need, Path]]] = {}
    for decision in decisions:
        if decision.action != "bring":
            continue
        try:
            wheel = wheel_for(decision.need, folder)
        except FileNotFoundError as exc:
            result.failed[decision.need.dist] = str(exc)
            continue
        groups.setdefault(decision.need.stages, []).append((decision.need, wheel))
    if groups:
        target.mkdir(parents=True, exist_ok=True)
    for members in groups.values():
        error = _pip_install([w for _, w in members], target, deadline - time.monotonic(), result.log)
        if not error:
            result.wheels += [w for _, w in members]
            continue
        for need, wheel in members:  # find which wheel(s) of the group fail
            error = _pip_install([wheel], target, deadline - time.monotonic(), result.log)
            if error:
                result.failed[need.dist] = error
            else:
                result.wheels.append(wheel)
    return result


def _pip_install(wheels: Sequence[Path], target: Path, timeout_s: float, log: list[str]) -> str:
    """One pip call; "" when it installed, else why not (pip's last line, or the time limit)."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    command = [*pip, "--upgrade", "--target", str(target), *map(str, wheels)]
    log.append("$ " + " ".join(command))
    if timeout_s <= 1:
        return "no time left for the install"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"pip did not finish in {timeout_s:.0f} s"
    log += [done.stdout, done.stderr]
    if done.returncode == 0:
        return ""
    lines = [line for line in (done.stderr + done.stdout).strip().splitlines() if line.strip()]
    return f"pip exit {done.returncode}: {lines[-1][:300] if lines else 'no output'}"


def blocked_stages(
    unusable: Iterable[str], stages: Sequence[str], needs: Sequence[Need] = NEEDS
) -> dict[str, list[str]]:
    """For each stage that imports one of the `unusable` distributions (unmet on the image, or failed to
    install), those distributions."""
    by_dist = {need.dist: need for need in needs}
    blocked: dict[str, list[str]] = {}
    for dist in unusable:
        need = by_dist.get(dist)
        for stage in stages if need is None or need.stages is None else need.stages:
            if stage in stages:
                blocked.setdefault(stage, []).append(dist)
    return blocked


def download(folder: Path, needs: Sequence[Need] = NEEDS) -> int:
    """Fetch every carried wheel for CPython 3.12 on x86-64 Linux into `folder` (binary wheels from PyPI;
    the sdist-only ones built here); refuse a set over `CARRY_LIMIT_BYTES`. Returns their total size."""
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    binary = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    binary += ["--python-version", PYTHON, "--implementation", "cp", *platforms, "-d", str(folder)]
    for need in needs:
        if need.version is None:
            continue
        try:
            wheel_for(need, folder)
            continue
        except FileNotFoundError:
            pass
        spec = f"{need.dist}=={need.version}"
        if need.build:
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), spec], check=True
            )
        else:
            subprocess.run([*binary, spec], check=True)
        if "py3-none-any" not in wheel_for(need, folder).name and need.build:
            raise RuntimeError(f"{need.dist} built a platform wheel; only py3-none-any builds run there")
    total = sum(p.stat().st_size for p in folder.glob("*.whl"))
    if total > CARRY_LIMIT_BYTES:
        raise RuntimeError(f"{folder} holds {total / 2**20:.1f} MiB of wheels, over {CARRY_LIMIT_BYTES / 2**20:.0f}")
    return total


def main(argv: Sequence[str] | None = None) -> int:
    """`download DIR`: prepare the carried wheels; `plan`: print what this interpreter's image would need."""
    parser = argparse.ArgumentParser(prog="python -m trainer.gpucheck.wheels")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("download").add_argument("folder", type=Path)
    sub.add_parser("plan")
    args = parser.parse_args(argv)
    if args.command == "download":
        total = download(args.folder)
        print(f"{args.folder}: {len(list(args.folder.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB")
        return 0
    for decision in plan(image_versions()):
        print(f"{decision.action:5}  {decision.need.dist:26} {decision.reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
