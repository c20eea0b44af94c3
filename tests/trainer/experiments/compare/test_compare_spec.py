"""Comparison configs: one budget for every arm, every arm a registered objective, clear errors."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from trainer.branching.plugin import fork_config
from trainer.config import ConfigError, TrainerConfig
from trainer.experiments.compare import CompareSpec, load_spec
from trainer.experiments.compare.run import arm_config, model_folders
from trainer.models.ladder import RECORD as LADDER_RECORD
from trainer.models.ladder import LadderSpec
from trainer.objectives.registry import build_config, get_objective
from trainer.quickstart.models import SHIPPED
from trainer.quickstart.plans import LADDER

ATOD_ABLATIONS = {"atod-ablation": "alfworld", "atod-ablation-webshop": "webshop", "atod-ablation-searchqa": "searchqa"}


@pytest.mark.parametrize("comparison", ATOD_ABLATIONS)
def test_atod_ablation_arms_share_one_budget(comparison: str) -> None:
    spec = load_spec(comparison)
    assert [a.name for a in spec.arms] == [
        "grpo",
        "opd",
        "divopd",
        "branchopd",
        "opd-multi",
        "atod",
        "atod-tdur-none",
        "atod-tdur-token",
        "atod-anneal-off",
    ]
    configs = {a.name: arm_config(spec, a, 1, Path("out"), Path("models"), "127.0.0.1:1") for a in spec.arms}
    for name, config in configs.items():
        get_objective(config.objective.name)  # registered
        assert config.optim.lr == spec.lr and config.steps == spec.steps and config.seed == 1
        assert config.models.student == "models/student-warm" and config.env.targets == ["127.0.0.1:1"]
        assert config.env.name == ATOD_ABLATIONS[comparison]
        rollout = config.rollout
        if config.divopd.enabled:  # every lockstep producer plays one rollout batch per update
            per_step = rollout.tasks_per_step * config.divopd.producers
        elif rollout.strategy == "branch":  # mains + at most forks x continuations each
            fork = fork_config(config)
            per_step = rollout.tasks_per_step * (1 + fork.num_forks * fork.continuations)
        else:
            per_step = rollout.group_size * rollout.tasks_per_step
        assert per_step == 16 or (rollout.strategy == "branch" and per_step <= 16), name
    assert configs["opd"].rollout.group_size == 1 and configs["opd-multi"].rollout.group_size == 4
    divopd = configs["divopd"].divopd
    assert divopd.reader == "divopd" and divopd.schedule == "lockstep"
    assert configs["divopd"].eval.every == spec.eval_every  # the async driver evaluates as the sync one
    assert configs["branchopd"].rollout.snapshots and configs["branchopd"].objective.name == "branchopd"
    assert configs["atod-tdur-token"].objective.params["tdur"] == "token"
    assert configs["atod"].objective.params["coef_anneal_steps"] == spec.steps
    assert configs["atod-anneal-off"].objective.params["anneal"] is False
    quick = spec.sized(True, {"seeds": 3}, arms=["grpo", "branchopd"])
    assert quick.steps < spec.steps and quick.seeds == 3 and quick.lr == spec.lr
    assert [a.name for a in quick.arms] == ["grpo", "branchopd"]
    assert spec.sized(False, {"steps": 4, "eval_every": 2}).steps == 4
    assert spec.seed_range == range(spec.seeds)
    assert spec.sized(False, {"seeds": 1, "first_seed": 2}).seed_range == range(2, 3)  # one process per seed
    with pytest.raises(ConfigError, match="first_seed >= 0"):
        spec.sized(False, {"first_seed": -1})
    with pytest.raises(ConfigError, match="unknown arms"):
        spec.sized(False, arms=["nope"])
    with pytest.raises(ConfigError, match="only seeds, first_seed, steps"):
        spec.sized(False, {"lr": 1})
    with pytest.raises(ConfigError, match="multiple of eval_every"):
        spec.sized(False, {"steps": 5})
    assert {c["better"] for c in spec.claims} | {c["worse"] for c in spec.claims} <= {a.name for a in spec.arms}


def test_environment_variants_extend_the_alfworld_comparison() -> None:
    alfworld, webshop, searchqa = (load_spec(name) for name in ATOD_ABLATIONS)
    for variant in (webshop, searchqa):
        assert variant.arms == alfworld.arms and variant.claims == alfworld.claims
        assert (variant.seeds, variant.steps, variant.lr, variant.quick) == (
            alfworld.seeds,
            alfworld.steps,
            alfworld.lr,
            alfworld.quick,
        )
        assert variant.models != alfworld.models and variant.paper != alfworld.paper
    held_out = arm_config(searchqa, searchqa.arms[0], 0, Path("out"), Path("m"), "127.0.0.1:1")
    assert held_out.env.eval_split == "test" and held_out.env.max_turns == 4 and held_out.prompt.style == "atod"


def test_the_ladder_comparison_starts_every_arm_from_the_ladders_models(tmp_path: Path) -> None:
    """atod-ladder (docs/design/046): every arm from the ALFWorld ladder's models (shipped, or made in the models
    folder), replies drawn among the listed actions, one budget, OPD's and ATOD's distillation the same forward KL
    over the listed replies, GRPO's and ATOD's RL term on the replies, ATOD with the paper's T-DUR, 4 episodes a game
    at every evaluation; a ladder comparison makes no models."""
    spec = load_spec("atod-ladder")
    shipped = SHIPPED / LADDER["alfworld"].folder
    configs = {a.name: arm_config(spec, a, 2, Path("out"), tmp_path / "empty", "127.0.0.1:1") for a in spec.arms}
    assert list(configs) == ["grpo", "opd", "atod", "atod-tdur-none", "atod-anneal-off"]
    for name, config in configs.items():
        assert config.models.student == str(shipped / "student") and config.models.teacher == str(shipped / "teacher")
        assert config.rollout.group_size * config.rollout.tasks_per_step == 16, name
        assert config.rollout.action_match == "choice" and config.optim.ema_decay == 0 and config.seed == 2
        build_config(config.objective.name, config.objective.params)  # a valid objective config
    assert all(config.eval.samples == 4 for config in configs.values())
    distillation = {"kl_over": "replies", "reply_kl": "forward"}
    assert configs["opd"].objective.params == distillation
    assert configs["grpo"].objective.params == {"rl_over": "replies"}  # the RL term on the sampled policy (note 047)
    atod = build_config("atod", configs["atod"].objective.params)
    assert (atod.kl_over, atod.reply_kl, atod.rl_over, atod.tdur, atod.anneal, atod.coef_anneal_steps) == (
        "replies",
        "forward",
        "replies",
        "turn",
        True,
        150,
    )
    assert build_config("atod", configs["atod-tdur-none"].objective.params).tdur == "none"
    assert build_config("atod", configs["atod-anneal-off"].objective.params).anneal is False
    assert {c["better"] for c in spec.claims} | {c["worse"] for c in spec.claims} <= set(configs)

    made = tmp_path / "made"  # `trainer make-models --ladder alfworld --out made` leaves the same folders
    shutil.copytree(shipped, made)
    assert model_folders(spec, made) == {"student": made / "student", "teacher": made / "teacher"}
    with pytest.raises(ConfigError, match="drop expert_tasks"):
        replace(spec, expert_tasks=10).checked("x")
    with pytest.raises(ConfigError, match="needed without `ladder`"):
        replace(spec, ladder="").checked("x")
    with pytest.raises(ConfigError, match="no ladder 'nope'"):
        model_folders(replace(spec, ladder="nope"), made)


def test_the_divopd_ladder_comparison_differs_by_the_reader_alone() -> None:
    spec = load_spec("divopd-ladder")
    configs = {a.name: arm_config(spec, a, 0, Path("out"), Path("none"), "127.0.0.1:1") for a in spec.arms}
    readers = {name: config.divopd.reader for name, config in configs.items()}
    assert readers == {
        "opd-async": "vanilla",
        "divopd": "divopd",
        "divopd-base": "divopd-base",
        "divopd-focus": "divopd-focus",
        "divopd-focus-takeover": "divopd-focus",
    }
    for config in configs.values():
        assert config.divopd.enabled and config.divopd.schedule == "lockstep" and config.divopd.batch_rows == 64
        assert (config.optim.epochs, config.optim.mini_batches, config.rollout.action_match) == (1, 1, "choice")
        assert config.objective.params == {"kl_over": "replies", "reply_kl": "forward"}
    assert configs["divopd-focus-takeover"].rollout.strategy == "recovery"
    assert (spec.target, spec.baseline_arm) == (0.35, "opd-async")
    # one process per arm: an arm trained without the baseline arm has no speed-ups to compute (the whole report has)
    assert spec.sized(False, arms=["divopd-focus"]).baseline_arm == ""
    assert spec.sized(False, arms=["opd-async", "divopd-focus"]).baseline_arm == "opd-async"
    assert {configs[name].rollout.strategy for name in readers if name != "divopd-focus-takeover"} == {"group"}
    assert {c["better"] for c in spec.claims} | {c["worse"] for c in spec.claims} <= set(configs)


def test_the_divopd_load_comparison_differs_from_divopd_ladder_by_the_producer_load() -> None:
    low, high = load_spec("divopd-ladder"), load_spec("divopd-ladder-load")
    out, models, target = Path("out"), Path("none"), "127.0.0.1:1"
    low_configs = {a.name: arm_config(low, a, 0, out, models, target) for a in low.arms}
    for arm in high.arms:
        config = arm_config(high, arm, 0, out, models, target)
        # 16 trajectories an update arrive (Table 2's High rollout batch) for the same 64 rows taken
        assert config.divopd.producers * config.rollout.tasks_per_step * config.rollout.group_size == 16
        same_reader = low_configs[arm.name]
        assert config.divopd.reader == same_reader.divopd.reader
        assert config.divopd.batch_rows == same_reader.divopd.batch_rows == 64
        assert (config.optim.lr, config.objective.params) == (same_reader.optim.lr, same_reader.objective.params)
    assert (high.steps, high.baseline_arm) == (150, "opd-async")
    assert {c["better"] for c in high.claims} | {c["worse"] for c in high.claims} <= {a.name for a in high.arms}


def test_the_branchopd_ladder_comparison_branches_from_snapshots() -> None:
    spec = load_spec("branchopd-ladder")
    configs = {a.name: arm_config(spec, a, 0, Path("out"), Path("none"), "127.0.0.1:1") for a in spec.arms}
    opd, branch = configs["opd"], configs["branchopd"]
    assert opd.rollout.tasks_per_step == 16 and opd.rollout.strategy == "group"
    fork = fork_config(branch)
    assert branch.rollout.snapshots and branch.objective.name == "branchopd"
    assert branch.rollout.tasks_per_step * (1 + fork.num_forks * fork.continuations) <= 16
    for config in configs.values():
        assert config.objective.params == {"kl_over": "replies", "reply_kl": "forward"}
        assert config.rollout.action_match == "choice" and config.optim.ema_decay == 0


def test_the_branchopd_batch_ablation_reuses_the_comparisons_runs() -> None:
    ladder, batch = load_spec("branchopd-ladder"), load_spec("branchopd-ladder-batch")

    def configs(spec: CompareSpec) -> dict[str, TrainerConfig]:
        return {a.name: arm_config(spec, a, 0, Path("out"), Path("none"), "127.0.0.1:1") for a in spec.arms}

    ladder_configs, batch_configs = configs(ladder), configs(batch)
    for name in ("opd", "branchopd"):
        assert batch_configs[name] == ladder_configs[name]
    wide = batch_configs["branchopd-t8"]
    assert wide.rollout.tasks_per_step == 8 and fork_config(wide) == fork_config(batch_configs["branchopd"])


def test_extends_replaces_whole_keys_and_refuses_loops(tmp_path: Path) -> None:
    child = tmp_path / "child.yaml"
    child.write_text("extends: atod-ablation\nsteps: 12\neval_every: 6\n")
    spec = load_spec(child)
    assert spec.steps == 12 and spec.arms == load_spec("atod-ablation").arms and spec.name == "child"
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"extends: {loop}\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_spec(loop)


def test_a_suite_is_not_a_comparison_and_takes_no_models_folder() -> None:
    from trainer.experiments.compare import compare
    from trainer.experiments.compare.suite import suite_members

    assert suite_members("atod-ablation-all") == ("atod-ablation", "atod-ablation-searchqa")
    assert suite_members("atod-ablation") == ()
    with pytest.raises(ConfigError, match="suite of comparisons"):
        load_spec("atod-ablation-all")
    with pytest.raises(ConfigError, match="drop --models"):
        compare("atod-ablation-all", "out", "models")


def test_unknown_comparison_names_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shipped: atod-ablation"):
        load_spec("no-such-comparison")
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: quickstart.yaml\narms: []\n")
    with pytest.raises(ConfigError, match="bad comparison config"):
        load_spec(bad)


def test_delegated_comparisons_map_out_models_and_quick() -> None:
    from trainer.experiments.compare.delegated import delegated_argv, is_delegated

    assert is_delegated("divopd-stress") and is_delegated("branchopd-savings") and not is_delegated("atod-ablation")
    argv = delegated_argv("divopd-stress", "out", "m", quick=True)
    assert argv[:4] == ["--out", "out", "--runs", str(Path("out") / "runs")]
    assert f"models.student={Path('m') / 'student-warm'}" in argv and argv[-4:] == ["4", "--loads", "low", "high"]
    assert delegated_argv("branchopd-savings", "out", None, quick=False) == ["--out", "out"]


def _searchqa_ladder_models(tmp_path: Path) -> tuple[Path, dict]:
    """A folder that looks like `trainer make-models --ladder searchqa`'s output, and its ladder record."""
    made = tmp_path / "ladder-searchqa"
    for role in ("student", "teacher"):
        (made / role).mkdir(parents=True)
        (made / role / "config.json").write_text("{}")
    record = {"spec": asdict(LadderSpec.load("searchqa"))}
    (made / LADDER_RECORD).write_text(json.dumps(record))
    return made, record


def test_the_searchqa_ladder_comparison_runs_atods_arms_on_free_text(tmp_path: Path) -> None:
    """atod-ladder-searchqa (docs/design/052): atod-ladder's five arms (and note 053's forward-KL OPD and ATOD,
    forward-KL OPD at ATOD's G = 4 sampling, and ATOD's two ablations with the forward KL) on the Search-QA ladder's
    models where `trainer make-models --ladder searchqa` made them (a ladder the quickstart does not ship), the
    papers' token-level terms (free-text replies), one 8-trajectory budget, ATOD annealed over 30 of the 40 steps, and
    a held-out set that takes the seven datasets in turn. Elsewhere, or made from another spec, the comparison names
    the command."""
    spec = load_spec("atod-ladder-searchqa")
    made, record = _searchqa_ladder_models(tmp_path)
    configs = {a.name: arm_config(spec, a, 1, Path("out"), made, "127.0.0.1:1") for a in spec.arms}
    assert list(configs) == [
        "grpo", "opd", "atod", "atod-tdur-none", "atod-anneal-off", "opd-forward", "atod-forward", "opd-forward-g4",
        "atod-forward-tdur-none", "atod-forward-anneal-off",
    ]  # fmt: skip
    for name, config in configs.items():
        assert config.env.name == "searchqa" and config.rollout.action_match == "exact", name
        assert config.rollout.group_size * config.rollout.tasks_per_step == 8, name
        assert config.models.student == str(made / "student"), name
        assert len(config.eval.families_in_turn) == 7 and config.eval.num_tasks == 56, name
        objective = build_config(config.objective.name, config.objective.params)
        if config.objective.name == "atod":
            assert (objective.kl_over, objective.rl_over, objective.coef_anneal_steps) == ("tokens", "tokens", 30)
    assert configs["grpo"].rollout.group_size == 4 and configs["opd"].rollout.group_size == 1
    assert build_config("atod", configs["atod-tdur-none"].objective.params).tdur == "none"
    assert build_config("atod", configs["atod-anneal-off"].objective.params).anneal is False
    for name in ("opd", "atod"):  # the papers' token signal, and note 053's ablation beside it
        assert build_config(name, configs[name].objective.params).token_kl == "reverse"
        assert build_config(name, configs[f"{name}-forward"].objective.params).token_kl == "forward"
    assert configs["opd-forward"].rollout.group_size == 1
    g4 = configs["opd-forward-g4"]  # ATOD's sampling under OPD's objective
    assert (g4.rollout.group_size, g4.objective.name) == (4, "opd")
    assert build_config("opd", g4.objective.params).token_kl == "forward"
    tdur_none = build_config("atod", configs["atod-forward-tdur-none"].objective.params)
    anneal_off = build_config("atod", configs["atod-forward-anneal-off"].objective.params)
    assert (tdur_none.token_kl, tdur_none.tdur, tdur_none.anneal) == ("forward", "none", True)
    assert (anneal_off.token_kl, anneal_off.tdur, anneal_off.anneal) == ("forward", "turn", False)
    assert {c["better"] for c in spec.claims} | {c["worse"] for c in spec.claims} <= set(configs)
    with pytest.raises(ConfigError, match="trainer make-models --ladder searchqa --out"):
        model_folders(spec, tmp_path / "elsewhere")
    record["spec"]["teacher"]["sft_steps"] += 1
    (made / LADDER_RECORD).write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="not in"):
        model_folders(spec, made)


def test_the_long_searchqa_comparison_doubles_the_steps_and_scales_atods_anneal(tmp_path: Path) -> None:
    """atod-long-searchqa: atod-ladder-searchqa's forward-KL OPD and ATOD for 80 steps instead of 40 (past OPD's
    flattening), ATOD annealed over 60 of them (the same 3/4 of the run), everything else inherited."""
    short, long = load_spec("atod-ladder-searchqa"), load_spec("atod-long-searchqa")
    made, _ = _searchqa_ladder_models(tmp_path)
    before = {a.name: arm_config(short, a, 1, Path("out"), made, "127.0.0.1:1") for a in short.arms}
    after = {a.name: arm_config(long, a, 1, Path("out"), made, "127.0.0.1:1") for a in long.arms}
    assert list(after) == ["opd-forward", "atod-forward"] and (short.steps, long.steps) == (40, 80)
    for name, config in after.items():
        assert config.steps == 80, name
        assert config.model_copy(update={"steps": 40, "objective": before[name].objective}) == before[name], name
    assert after["opd-forward"].objective == before["opd-forward"].objective
    atod = build_config("atod", after["atod-forward"].objective.params)
    assert (atod.token_kl, atod.tdur, atod.anneal, atod.coef_anneal_steps) == ("forward", "turn", True, 60)
    assert [(c["better"], c["worse"]) for c in long.claims] == [("atod-forward", "opd-forward")]


def test_the_fig4_comparison_runs_the_atod_arms_as_the_searched_ladder_comparison_did() -> None:
    """atod-ladder-fig4 continues atod-ladder's ATOD arms without its search: each at the rate the search chose."""
    ladder, fig4 = load_spec("atod-ladder"), load_spec("atod-ladder-fig4")
    assert not fig4.lr_values and [a.name for a in fig4.arms] == [a.name for a in ladder.arms]
    chosen = 1.25e-4  # atod-ladder's search, for OPD and every ATOD arm (its report)
    for arm, same in zip(ladder.arms, fig4.arms, strict=True):
        if arm.objective in ("opd", "atod"):
            searched = arm_config(ladder, arm, 1, Path("out"), Path("none"), "127.0.0.1:1", chosen)
            assert arm_config(fig4, same, 1, Path("out"), Path("none"), "127.0.0.1:1") == searched
