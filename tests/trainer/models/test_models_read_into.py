"""`read_weights_into`: a saved folder's weights copied into a model's own tensors (the hf teacher's wake-up)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from trainer.models.loading import load_model, read_weights_into
from trainer.models.tiny import TinyModels


def test_weights_are_read_into_the_models_own_tensors(tiny_models: TinyModels) -> None:
    model = load_model(tiny_models.teacher, dtype=torch.bfloat16)
    want = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    pointers = {name: tensor.data_ptr() for name, tensor in model.state_dict().items()}
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    assert read_weights_into(model, tiny_models.teacher)
    for name, tensor in model.state_dict().items():
        assert tensor.dtype == torch.bfloat16 and tensor.data_ptr() == pointers[name], name
        assert torch.equal(tensor, want[name]), name


def test_folders_that_do_not_fit_the_model_are_refused_untouched(tiny_models: TinyModels, tmp_path: Path) -> None:
    model = load_model(tiny_models.teacher)
    before = [p.clone() for p in model.parameters()]
    folder = tmp_path / "no-weights"  # e.g. a sharded checkpoint: config and tokenizer, no safetensors
    shutil.copytree(tiny_models.teacher, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    assert not read_weights_into(model, folder)
    assert not read_weights_into(model, tiny_models.student)  # the same names, other shapes (hidden 64, not 128)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
