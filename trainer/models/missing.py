"""What a config's missing model folders are, and the one command that makes each (checked before a run starts).

The shipped configs name four kinds of model folder, each made by one command:

* `<dir>/student-warm`, `<dir>/teacher-sft` (and SmolLM2's base): the quickstart's student and teacher
  (`trainer quickstart`, which copies the shipped tiny ones into `runs/models`; `--model smollm2` for
  `runs/models-smollm2`; `--models DIR` elsewhere); `runs/models-ladder-ENV/{student,teacher}`: the ladder
  quickstart's (`trainer quickstart --model ladder --env ENV`, which copies the shipped ladder's);
* `<dir>/student-sft`: a tiny random student SFT'd on the expert's turns (`trainer make-models --sft-steps N`);
* `<dir>/student`, `<dir>/teacher`: tiny random models on the environment's text (`trainer make-models`);
* `<dir>/ladder-NAME/{teacher,student}`: a model ladder's (`trainer make-models --ladder NAME`, shipped).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from trainer.config import ConfigError, ModelsConfig
from trainer.quickstart.plans import LADDER, PLANS, default_models_dir

QUICKSTART_FOLDERS = ("student-warm", "teacher-sft", "smollm2-135m-instruct")
"""The model folders `trainer quickstart` leaves in its models folder (the tiny plan's, SmolLM2's)."""
LADDER_PREFIX = "ladder-"
"""A model ladder's folder (`<dir>/ladder-NAME/{teacher,student}`) is made by `trainer make-models --ladder NAME`."""
SFT_STEPS = 300
"""The `--sft-steps` the remedy names for a `student-sft` folder (`trainer sft`'s default)."""


class ModelsNotFound(ConfigError):
    """A model folder the config names does not exist; the message names the command that makes it."""


def is_model(path: str) -> bool:
    """A local Hugging Face folder (config.json or tokenizer.json) or a model file (GGUF)."""
    folder = Path(path)
    return folder.is_file() or (folder / "config.json").is_file() or (folder / "tokenizer.json").is_file()


def remedy(path: str, config_name: str) -> str:
    """The one command that makes the model folder `path` that the config `config_name` names."""
    folder = Path(path)
    out = shlex.quote(str(folder.parent))
    ladder_quickstart = any(default_models_dir(plan.folder) == folder.parent for plan in LADDER.values())
    if folder.name in QUICKSTART_FOLDERS or (ladder_quickstart and folder.name in ("student", "teacher")):
        known = (*PLANS.values(), *LADDER.values())
        plans = [plan for plan in known if default_models_dir(plan.folder) == folder.parent]
        name = plans[0].name if plans else "smollm2" if folder.name.startswith("smollm2") else "tiny"
        return (
            "trainer quickstart"
            + ("" if name == "tiny" else f" --model {name}")
            + (f" --env {plans[0].env}" if plans and plans[0].env else "")
            + ("" if plans else f" --models {out}")
        )
    config = shlex.quote(config_name)
    if folder.parent.name.startswith(LADDER_PREFIX):
        return f"trainer make-models --ladder {folder.parent.name.removeprefix(LADDER_PREFIX)} --out {out}"
    if folder.name == "student-sft":
        return f"trainer make-models --config {config} --out {out} --sft-steps {SFT_STEPS}"
    if folder.name in ("student", "teacher"):
        return f"trainer make-models --config {config} --out {out}"
    return f"trainer make-models --config {config} --out {out} (then point models.* at a folder it makes)"


def check_models(models: ModelsConfig, config_name: str) -> None:
    """Raise `ModelsNotFound` naming each missing model folder of `models` and the command that makes it."""
    named = {"models.student": models.student, "models.teacher": models.teacher}
    missing = {field: path for field, path in named.items() if path and not is_model(path)}
    if missing:
        lines = [
            f"  {field}: {path} does not exist; make it with: {remedy(path, config_name)}"
            for field, path in missing.items()
        ]
        raise ModelsNotFound(
            "the config names models that are not there (models load from local folders only):\n" + "\n".join(lines)
        )
