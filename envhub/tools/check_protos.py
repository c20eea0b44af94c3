"""Check that envhub/v1 holds exactly what `make protos` generates from protos/.

Generates into a temporary folder and compares file by file; exits 1 with the
remedy when anything differs.
"""

from __future__ import annotations

import filecmp
import importlib.resources
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    with tempfile.TemporaryDirectory() as out:
        well_known = importlib.resources.files("grpc_tools") / "_proto"
        args = [
            "protoc",
            "-Iprotos",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            *protos,
        ]
        if protoc.main(args) != 0:
            print("protoc failed", file=sys.stderr)
            return 1
        stale = []
        for generated in Path(out).rglob("*.py*"):
            committed = ROOT / generated.relative_to(out)
            if not committed.exists() or not filecmp.cmp(generated, committed, shallow=False):
                stale.append(str(committed.relative_to(ROOT)))
    if stale:
        print(f"generated protobuf code is stale: {', '.join(stale)}; run `make protos` and commit", file=sys.stderr)
        return 1
    print(f"generated protobuf code is current ({len(protos)} proto file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
