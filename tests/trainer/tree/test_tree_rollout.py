"""TreeStrategy against a real ALFWorld server on loopback with the tiny student: continuations start in the
forked state from the forked turn's prompt, share their parents' states, and make one learner row per distinct
turn."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from envhub.client import Sessions
from envhub.client.formats import action_format
from envhub.client.sync import EnvhubClient
from trainer.backends.hf import HFBackend
from trainer.batching import SyncGroups
from trainer.branching.rollout import observation_before
from trainer.models.loading import load_tokenizer
from trainer.models.tiny import TinyModels
from trainer.prompts import PromptRenderer
from trainer.rollout import RolloutSettings, SamplingSettings
from trainer.rollout.strategies import RolloutParts
from trainer.tree.diagnostics import BRANCH_TURNS, DISTINCT_TURNS, tree_metrics
from trainer.tree.select import TreeConfig
from trainer.tree.strategy import TreeStrategy


@pytest.fixture(scope="module")
def port(alfworld_server: str) -> Iterator[Sessions]:
    client = EnvhubClient(alfworld_server)
    yield Sessions(client, "alfworld")
    client.close()


@pytest.mark.slow
def test_continuations_share_their_parents_prefix_and_states(port: Sessions, tiny_models: TinyModels) -> None:
    tok = load_tokenizer(tiny_models.student)
    student = HFBackend.from_pretrained(tiny_models.student, stop=action_format("alfworld").stop)
    renderer = PromptRenderer("alfworld", style="compact", history_length=1)
    settings = RolloutSettings(group_size=1, max_turns=4, snapshots=True, max_prompt_tokens=384)
    parts = RolloutParts(port, student, tok, renderer, settings, config=None)
    strategy = TreeStrategy(parts, TreeConfig(forks=2, continuations=2, depth=1, select="entropy"))
    sampling = SamplingSettings(max_new_tokens=16, top_logprobs=20, seed=3)
    try:
        roots, root_stats = strategy.run([("train/00001", 1), ("train/00002", 2)], sampling)
        children, stats = strategy.expand(roots, dataclasses.replace(sampling, seed=77), select_seed=0)
    finally:
        strategy.close()
    forks = {(c.group, c.fork) for c in children}
    assert len(forks) == 4 and len(children) == 2 * len(forks), "2 fork states per root, 2 continuations each"
    assert stats.forks == len(children) and stats.fork_s > 0
    for child in children:
        assert child.fork is not None
        parent = roots[child.group]
        turn = child.fork[0]
        assert [t.node for t in child.turns[:turn]] == [t.node for t in parent.turns[:turn]]
        assert not any(t.supervised for t in child.turns[:turn])
        assert child.turns[turn].prompt_ids == parent.turns[turn].prompt_ids, "the forked turn is re-sampled"
        assert child.turns[turn].supervise_from == 0 and child.turns[turn].node != parent.turns[turn].node
        assert child.turns[turn].admissible == parent.turns[turn].admissible
        assert observation_before(child, turn) == observation_before(parent, turn)
    nodes = [t.node for trajectory in roots + children for t in trajectory.turns if t.supervised]
    assert len(nodes) == len(set(nodes)), "every supervised turn is its own state"

    batch = SyncGroups("history").compose(roots + children)
    metrics = tree_metrics(roots + children, root_stats, stats)
    assert batch.num_rows == metrics[DISTINCT_TURNS] < metrics[BRANCH_TURNS]
    assert int(batch.loss_mask.sum()) == root_stats.generated_tokens + stats.generated_tokens
    assert batch.states is not None
    values = batch.states.values(batch.rewards)
    roots_state = batch.states.parent[batch.states.parent >= 0].min()
    assert float(values[roots_state]) == pytest.approx(float(batch.rewards[batch.group_ids == 0].mean()))
