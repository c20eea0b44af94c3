"""buf lint and buf breaking on the contract: protos/ passes against protos/released, broken copies fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envhub.tools import buf_check, protoc

BUF = buf_check.find_buf()
pytestmark = pytest.mark.skipif(BUF is None, reason="buf is not installed (make buf)")
STEP_REQUEST_ACTION = "  string action = 2;\n"


def _copy(tmp_path: Path, old: str, new: str) -> Path:
    """protos/ copied with one edit to envhub/v1/envhub.proto."""
    copy = tmp_path / "protos"
    shutil.copytree(protoc.PROTOS, copy)
    path = copy / "envhub" / "v1" / "envhub.proto"
    text = path.read_text()
    assert text.count(old) == 1, f"the edit's anchor {old!r} is not unique"
    path.write_text(text.replace(old, new))
    return copy


def test_the_contract_passes_lint_and_keeps_the_released_contract() -> None:
    assert BUF is not None
    assert buf_check.check(BUF) == []
    assert buf_check.main(["--buf", BUF]) == 0


@pytest.mark.parametrize(
    ("new", "finding"),
    [
        ("  string action = 12;\n", 'Previously present field "2" with name "action" on message "StepRequest"'),
        ("  bytes action = 2;\n", 'on message "StepRequest" changed type from "string" to "bytes"'),
        ("  string command = 2;\n", 'Field "2" on message "StepRequest" changed name from "action" to "command"'),
    ],
    ids=["renumbered", "retyped", "renamed"],
)
def test_a_breaking_change_fails_against_the_released_contract(tmp_path: Path, new: str, finding: str) -> None:
    assert BUF is not None
    broken = _copy(tmp_path, STEP_REQUEST_ACTION, new)
    findings = buf_check.check(BUF, broken)
    assert findings and all(line.startswith("breaking: ") for line in findings), findings
    assert any(finding in line for line in findings), findings
    assert buf_check.main(["--buf", BUF, "--protos", str(broken)]) == 1


def test_a_lint_violation_fails(tmp_path: Path) -> None:
    assert BUF is not None
    broken = _copy(tmp_path, STEP_REQUEST_ACTION, STEP_REQUEST_ACTION + "  // Added.\n  string badName = 90;\n")
    findings = buf_check.check(BUF, broken)
    assert [line for line in findings if line.startswith("lint: ") and "badName" in line], findings
