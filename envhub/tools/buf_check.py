"""`buf lint` and `buf breaking` on the wire contract: protos/ against the last released contract.

The released contract is protos/released/: the .proto files of the last release, with
`RELEASE` naming its version and commit (`make release-contract VERSION=x.y.z` refreshes it when a
version is released). Both sides are compiled by protoc with the include paths of the generated
code (`envhub.tools.protoc`) into FileDescriptorSets with source info, which buf reads as images,
so buf fetches no dependency (googleapis' google.rpc.Status) from a registry. The rules are in
protos/buf.yaml (lint: STANDARD and COMMENTS; breaking: FILE). buf itself is the npm package
@bufbuild/buf (`make buf` installs it into .cache/buf); `--buf` or ENVHUB_BUF name another.
Exits 0 when both pass, 1 with buf's findings, 2 when buf is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from envhub.tools import protoc

ROOT = protoc.ROOT
RELEASED = protoc.PROTOS / protoc.RELEASED
CONFIG = protoc.PROTOS / "buf.yaml"
LOCAL_BUF = ROOT / ".cache" / "buf" / "node_modules" / ".bin" / "buf"


def find_buf() -> str | None:
    """ENVHUB_BUF, else the buf `make buf` installed, else `buf` on PATH."""
    if os.environ.get("ENVHUB_BUF"):
        return os.environ["ENVHUB_BUF"]
    return str(LOCAL_BUF) if LOCAL_BUF.exists() else shutil.which("buf")


def image(protos: Path, out: Path) -> Path:
    """`protos` compiled into a FileDescriptorSet (imports and source info included) at `out`."""
    protoc.run([f"--descriptor_set_out={out}", "--include_imports", "--include_source_info"], protos)
    return out


def check(buf: str, protos: Path = protoc.PROTOS, against: Path = RELEASED) -> list[str]:
    """buf's findings, as `lint: ...` / `breaking: ...` lines (empty: both pass)."""
    with tempfile.TemporaryDirectory() as folder:
        current = image(protos, Path(folder) / "current.binpb")
        released = image(against, Path(folder) / "released.binpb")
        config = ["--config", str(CONFIG), "--path", "envhub"]
        runs = {
            "lint": [buf, "lint", str(current), *config],
            "breaking": [buf, "breaking", str(current), "--against", str(released), *config],
        }
        findings = []
        for name, command in runs.items():
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = (done.stdout + done.stderr).splitlines()
            if done.returncode != 0:
                findings += [f"{name}: {line}" for line in lines or [f"buf exited with {done.returncode}"]]
        return findings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protos", type=Path, default=protoc.PROTOS, help="the contract to check (default protos/)")
    parser.add_argument("--against", type=Path, default=RELEASED, help="the released contract (protos/released)")
    parser.add_argument("--buf", default=None, help="the buf binary (default: ENVHUB_BUF, .cache/buf, PATH)")
    args = parser.parse_args(argv)
    buf = args.buf or find_buf()
    if buf is None:
        print("buf is not installed: run `make buf` (npm install @bufbuild/buf) or set ENVHUB_BUF", file=sys.stderr)
        return 2
    findings = check(buf, args.protos, args.against)
    for line in findings:
        print(line, file=sys.stderr)
    if findings:
        print(
            f"the contract in {args.protos} fails buf lint or breaks the released one ({args.against}); "
            "a breaking change needs a new package (envhub.v2), see docs/protocol.md",
            file=sys.stderr,
        )
        return 1
    print(f"buf lint and buf breaking (against {args.against}) passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
