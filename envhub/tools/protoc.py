"""Run protoc on protos/ with the include paths envhub's contract needs (well-known types, google.rpc)."""

from __future__ import annotations

import importlib.resources
from collections.abc import Sequence
from pathlib import Path

import google.rpc
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
RELEASED = "released"
"""The folder of `protos` that holds the last released contract (`envhub.tools.buf_check`), not compiled with it."""


def proto_files(protos: Path = PROTOS) -> list[str]:
    """Every .proto under `protos` (default protos/), relative to it, sorted; not those of its `RELEASED` copy."""
    found = (path.relative_to(protos) for path in protos.rglob("*.proto"))
    return sorted(str(path) for path in found if path.parts[0] != RELEASED)


def include_paths(protos: Path = PROTOS) -> list[str]:
    """`protos`, protobuf's well-known types, and googleapis' google/rpc (google.rpc.Status)."""
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    googleapis = Path(next(iter(google.rpc.__path__))).parents[1]
    return [str(protos), str(well_known), str(googleapis)]


def run(outputs: Sequence[str], protos: Path = PROTOS) -> None:
    """protoc with `outputs` (e.g. "--python_out=DIR") over every proto file of `protos` (default protos/);
    RuntimeError on failure."""
    args = ["protoc", *(f"-I{path}" for path in include_paths(protos)), *outputs, *proto_files(protos)]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed (see its messages above)")
