"""What gpu-check brings to the lent H200: decided from the image's versions, never torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.gpucheck.wheels import NEEDS, Need, blocked_stages, older, plan, wheel_for

H200_IMAGE = {
    "torch": "2.11.0+cu130",
    "transformers": "5.17.0",
    "tokenizers": "0.23.2",
    "safetensors": "0.8.0",
    "numpy": "2.5.2",
    "pyyaml": "6.0.4",
    "tqdm": "4.70.1",
    "tensorboard": "2.21.0",
    "matplotlib": "3.11.2",
    "prometheus-client": "0.26.0",
    "networkx": "3.7",
    "typing-extensions": "4.16.0",
    "grpcio": "1.84.2",
    "protobuf": "6.33.6",
}
"""GPU-FACTS section 8's image (grpcio and protobuf older than envhub's generated code needs, as in the
Python 3.12 / torch 2.11 venv this was rehearsed in)."""


def _actions(image: dict[str, str]) -> dict[str, str]:
    return {d.need.dist: d.action for d in plan({n.dist: image.get(n.dist) for n in NEEDS})}


def test_versions_compare_by_release() -> None:
    assert older("2.10.1", "2.11") and not older("2.11.0+cu130", "2.11") and not older("1.85.3", "1.85.1")
    assert older("6.33.6", "7.35.1") and not older("10.0", "9.9.9")


def test_the_h200_image_gets_pydantic_grpc_and_alfworld_and_keeps_its_torch() -> None:
    actions = _actions(H200_IMAGE)
    brought = {name for name, action in actions.items() if action == "bring"}
    assert {"pydantic", "pydantic-core", "annotated-types", "typing-inspection"} <= brought
    assert {"grpcio", "protobuf", "grpcio-status", "grpcio-health-checking", "grpcio-reflection"} <= brought
    assert {"alfworld", "textworld", "fast-downward-textworld", "jericho", "tatsu"} <= brought
    assert actions["torch"] == actions["transformers"] == actions["typing-extensions"] == "ok"
    assert "unmet" not in actions.values()


def test_an_image_with_usable_versions_keeps_them() -> None:
    image = {**H200_IMAGE, "grpcio": "1.86.0", "protobuf": "7.36.0", "googleapis-common-protos": "1.80.0"}
    image |= {"pydantic": "2.10.0", "pydantic-core": "2.27.2", "grpcio-status": "1.86.0"}
    actions = _actions(image)
    # pydantic 2.10 will do, so its own core stays (ours is pinned to the pydantic we would bring)
    assert actions["pydantic"] == actions["pydantic-core"] == actions["grpcio"] == actions["protobuf"] == "ok"
    assert actions["googleapis-common-protos"] == actions["grpcio-status"] == "ok"
    # a protobuf we bring takes the generated code built against it along
    actions = _actions({**image, "protobuf": "6.33.6"})
    assert actions["protobuf"] == actions["googleapis-common-protos"] == actions["grpcio-status"] == "bring"


def test_what_is_never_carried_is_unmet_when_missing_or_too_old() -> None:
    decisions = plan({**{n.dist: H200_IMAGE.get(n.dist) for n in NEEDS}, "torch": "2.10.0"})
    torch = next(d for d in decisions if d.need.dist == "torch")
    assert torch.action == "unmet" and "2.10.0 < 2.11" in torch.reason
    carried = {n.dist for n in NEEDS if n.version}
    assert not {d for d in carried if d in ("torch", "triton") or d.startswith("nvidia")}


def test_the_wheel_of_a_need_is_found_by_normalised_name_and_version(tmp_path: Path) -> None:
    for name in ("prompt_toolkit-3.0.53-py3-none-any.whl", "TatSu-5.8.3-py2.py3-none-any.whl", "x-1-py3-none-any.whl"):
        (tmp_path / name).touch()
    assert wheel_for(Need("prompt-toolkit", "0", "", "3.0.53"), tmp_path).name.startswith("prompt_toolkit")
    assert wheel_for(Need("tatsu", "0", "", "5.8.3"), tmp_path).name.startswith("TatSu")
    with pytest.raises(FileNotFoundError, match="make gpu-wheels"):
        wheel_for(Need("tatsu", "0", "", "5.9.0"), tmp_path)


STAGES = ["throughput", "learner", "fsdp", "ipc", "hf", "train"]


def test_a_need_that_is_not_usable_blocks_only_the_stages_that_import_it() -> None:
    assert blocked_stages(["alfworld", "jericho"], STAGES) == {"train": ["alfworld", "jericho"]}
    assert set(blocked_stages(["pydantic"], STAGES)) == set(STAGES) - {"hf"}
    assert set(blocked_stages(["grpcio"], STAGES)) == set(STAGES) - {"learner"}
    assert set(blocked_stages(["torch"], STAGES)) == set(STAGES)  # the image's own: every stage
    assert blocked_stages(["alfworld"], ["learner"]) == {}  # a stage not run is not blocked
