"""The wire contract's own checks: every proto element is commented, generated code is current."""

from __future__ import annotations

from envhub.tools import check_protos, lint_protos


def test_every_proto_element_is_commented() -> None:
    missing, total = lint_protos.uncommented()
    assert total > 150 and missing == []


def test_generated_code_is_current() -> None:
    assert check_protos.main([]) == 0
