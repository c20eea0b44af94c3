"""`trainer export`: expert demonstrations and a run's rollouts as a Hugging Face `datasets` folder.

The folder holds JSON Lines, one row per turn, and a README.md whose `configs` header names the files, so
`datasets.load_dataset(folder, "expert")` (or `"rollouts"`) loads them with their splits; pandas reads the same
files with `pd.read_json(path, lines=True)`. Each row (`ROW_FIELDS`):

* `messages`: the chat of the turn, `[{"role": "user", "content": prompt}, {"role": "assistant", "content":
  reply}]`: the prompt as the trainer renders it for the config (the environment's action format, the config's
  prompt style and history), the reply in the action format (`<action>...</action>`; Search-QA's tags);
  TRL's `SFTTrainer` trains on this column as it is;
* `reply`, `action` (the parsed action; null for an unparsable rollout reply), `reward` (the step's; for the
  expert, whose episodes keep only their outcome, 1.0 on the winning action and 0.0 elsewhere),
  `won` (the episode's outcome), `task_id`, `split`, `turn` (0-based), `source` (`expert` or `rollout`),
  `step` (the training step the rollout was played at; 0 for the expert).

Rollouts come from a run's `rollouts.jsonl`, written as it trains when `logging.rollouts` is on (`ROLLOUTS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config import TrainerConfig
    from trainer.rollout import Trajectory
    from trainer.rollout.expert import ExpertEpisode

ROLLOUTS = "rollouts.jsonl"
"""A run's rollout rows (in `output_dir`), appended every training step when `logging.rollouts` is on."""
ROW_FIELDS = ("messages", "reply", "action", "reward", "won", "task_id", "split", "turn", "source", "step")
"""The columns of every exported row, in order."""

Row = dict[str, Any]


def _row(prompt: str, reply: str, action: str | None, reward: float, won: bool, **where: Any) -> Row:
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]
    row = {"messages": messages, "reply": reply, "action": action, "reward": float(reward), "won": won, **where}
    return {name: row[name] for name in ROW_FIELDS}


def rollout_rows(trajectories: Iterable[Trajectory], split: str, step: int) -> list[Row]:
    """One row per rendered turn of the trajectories (a branch's turns copied from its main are left out)."""
    rows = []
    for trajectory in trajectories:
        for index, turn in enumerate(trajectory.turns):
            if turn.prompt_text:
                where = {"task_id": trajectory.task_id, "split": split, "turn": index, "source": "rollout"}
                rows.append(
                    _row(
                        turn.prompt_text,
                        turn.response_text,
                        turn.action,
                        turn.reward,
                        trajectory.won,
                        **where,
                        step=step,
                    )
                )
    return rows


def append_rollouts(path: Path, trajectories: Iterable[Trajectory], split: str, step: int) -> None:
    """Append the rows of one training step's trajectories to a run's `rollouts.jsonl`."""
    with path.open("a") as file:
        file.writelines(json.dumps(row) + "\n" for row in rollout_rows(trajectories, split, step))


def expert_rows(config: TrainerConfig, episodes: Sequence[ExpertEpisode], split: str) -> list[Row]:
    """One row per expert action, its prompt rendered as the config's rollouts render theirs."""
    from trainer.quickstart.models import renderer_for
    from trainer.rollout.expert import action_text

    renderer = renderer_for(config)
    rows = []
    for episode in episodes:
        for index, (state, action) in enumerate(zip(episode.states, episode.actions, strict=True)):
            where = {"task_id": episode.task_id, "split": split, "turn": index, "source": "expert", "step": 0}
            reward = 1.0 if episode.won and index == len(episode.actions) - 1 else 0.0  # the winning action's
            rows.append(_row(renderer.render(state), action_text(action), action, reward, episode.won, **where))
    return rows


def read_rows(path: Path) -> list[Row]:
    """The rows of a JSON Lines file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_dataset(out: Path, parts: Mapping[str, Mapping[str, Sequence[Row]]]) -> Path:
    """Write `parts` (data set config -> split -> rows) as `<config>/<split>.jsonl` under `out`, with the README.md
    whose header `datasets.load_dataset(out, config)` reads; returns `out`."""
    header = ["---", "configs:"]
    for name, splits in parts.items():
        header += [f"- config_name: {name}", "  data_files:"]
        for split, rows in splits.items():
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
            header += [f"  - split: {split}", f"    path: {name}/{split}.jsonl"]
    counts = ", ".join(f"{name} {split}: {len(rows)}" for name, s in parts.items() for split, rows in s.items())
    body = [
        "---",
        "# envhub turns",
        "",
        f"Written by `trainer export` ({counts} rows): one row per turn, columns {', '.join(ROW_FIELDS)}.",
        "The schema: trainer/export.py and docs/trainer.md (Exporting data).",
        "",
    ]
    (out / "README.md").write_text("\n".join(header + body))
    return out


def export(
    config: TrainerConfig,
    out: str | Path,
    *,
    expert_tasks: int = 0,
    expert_split: str | None = None,
    run: str | Path | None = None,
) -> Path:
    """Export `expert_tasks` expert episodes of `expert_split` (default: the config's training split), played on
    the config's servers, and the rollouts of the run folder `run`; at least one of the two."""
    parts: dict[str, dict[str, list[Row]]] = {}
    if expert_tasks:
        from trainer.quickstart.models import expert_episodes
        from trainer.runs import env_targets

        split = expert_split or config.env.train_split
        playing = config.model_copy(update={"env": config.env.model_copy(update={"train_split": split})})
        with env_targets(playing) as targets:
            episodes = expert_episodes(playing, targets[0], expert_tasks)
        parts["expert"] = {split: expert_rows(playing, episodes, split)}
    if run is not None:
        path = Path(run) / ROLLOUTS
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: train with `--set logging.rollouts=true` to record rollouts")
        by_split: dict[str, list[Row]] = {}
        for row in read_rows(path):
            by_split.setdefault(row["split"], []).append(row)
        parts["rollouts"] = by_split
    if not parts:
        raise ValueError("nothing to export: give expert tasks (--expert-tasks N) or a run folder (--run DIR)")
    return write_dataset(Path(out), parts)
