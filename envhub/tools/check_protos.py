"""Check (or with --write, regenerate) the Python code in envhub/v1 from protos/.

Generates into a temporary folder and compares file by file; exits 1 with the
remedy when anything differs. `make protos` runs it with --write.
"""

from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from envhub.tools import protoc

ROOT = protoc.ROOT


def main(argv: list[str] | None = None) -> int:
    write = "--write" in (sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as out:
        protoc.run([f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"])
        stale = []
        for generated in sorted(Path(out).rglob("*.py*")):
            committed = ROOT / generated.relative_to(out)
            if not committed.exists() or not filecmp.cmp(generated, committed, shallow=False):
                stale.append(str(committed.relative_to(ROOT)))
                if write:
                    shutil.copyfile(generated, committed)
    if stale and not write:
        print(f"generated protobuf code is stale: {', '.join(stale)}; run `make protos` and commit", file=sys.stderr)
        return 1
    verb = "rewrote " + ", ".join(stale) if stale else "generated protobuf code is current"
    print(f"{verb} ({len(protoc.proto_files())} proto file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
