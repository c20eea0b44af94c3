"""Fail when a proto element (message, field, oneof, enum, enum value, service, rpc) has no comment.

Reads the descriptor's source info (protoc --include_source_info) for every file under
protos/ and lists each uncommented element by its full name. Run by `make lint` and a test.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2

from envhub.tools import protoc

# Field numbers inside descriptor.proto that make up source-info paths.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM, _MESSAGE_ONEOF = 2, 3, 4, 8
_ENUM_VALUE, _SERVICE_METHOD = 2, 2


def _elements(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[tuple[int, ...], str]]:
    """(source-info path, full name) of every element that needs a comment."""
    prefix = file.package

    def enum(path: tuple[int, ...], desc: descriptor_pb2.EnumDescriptorProto, scope: str) -> Iterator[tuple]:
        name = f"{scope}.{desc.name}"
        yield path, name
        for index, value in enumerate(desc.value):
            yield (*path, _ENUM_VALUE, index), f"{name}.{value.name}"

    def message(path: tuple[int, ...], desc: descriptor_pb2.DescriptorProto, scope: str) -> Iterator[tuple]:
        name = f"{scope}.{desc.name}"
        if desc.options.map_entry:
            return
        yield path, name
        for index, field in enumerate(desc.field):
            yield (*path, _MESSAGE_FIELD, index), f"{name}.{field.name}"
        for index, oneof in enumerate(desc.oneof_decl):
            if not oneof.name.startswith("_"):  # synthetic oneofs of proto3 `optional`
                yield (*path, _MESSAGE_ONEOF, index), f"{name}.{oneof.name}"
        for index, nested in enumerate(desc.nested_type):
            yield from message((*path, _MESSAGE_NESTED, index), nested, name)
        for index, nested_enum in enumerate(desc.enum_type):
            yield from enum((*path, _MESSAGE_ENUM, index), nested_enum, name)

    for index, desc in enumerate(file.message_type):
        yield from message((_FILE_MESSAGE, index), desc, prefix)
    for index, top_enum in enumerate(file.enum_type):
        yield from enum((_FILE_ENUM, index), top_enum, prefix)
    for index, service in enumerate(file.service):
        yield (_FILE_SERVICE, index), f"{prefix}.{service.name}"
        for method_index, method in enumerate(service.method):
            yield (_FILE_SERVICE, index, _SERVICE_METHOD, method_index), f"{prefix}.{service.name}.{method.name}"


def uncommented() -> tuple[list[str], int]:
    """Full names of the elements without a leading or trailing comment, and how many elements there are."""
    with tempfile.TemporaryDirectory() as out:
        target = Path(out) / "set.pb"
        protoc.run([f"--descriptor_set_out={target}", "--include_source_info"])
        files = descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes()).file
    missing, total = [], 0
    for file in files:
        commented = {
            tuple(location.path)
            for location in file.source_code_info.location
            if location.leading_comments.strip() or location.trailing_comments.strip()
        }
        for path, name in _elements(file):
            total += 1
            if path not in commented:
                missing.append(f"{file.name}: {name}")
    return missing, total


def main() -> int:
    missing, total = uncommented()
    if missing:
        print(f"{len(missing)} of {total} proto elements have no comment:", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"every one of {total} proto elements is commented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
