"""`rollout.action_match` (trainer/rollout/matching.py) on ALFWorld's and WebShop's admissible lists as the prompt
shows them."""

from __future__ import annotations

import pytest

from envhub.client.formats import action_format
from trainer.config import ConfigError
from trainer.models import train_tokenizer
from trainer.models.corpus import SEED_TEXTS
from trainer.rollout.expert import action_text
from trainer.rollout.matching import AdmissibleReplies, concrete_list, match_action, nearest_action
from trainer.workers.factory import rollout_settings

ROOM = [
    "go to cabinet 1", "go to cabinet 2", "go to cabinet 3", "go to countertop 1", "go to shelf 1", "go to shelf 2",
    "take pen 1 from shelf 2", "take statue 1 from shelf 2", "examine shelf 2", "inventory", "look",
]  # fmt: skip
WEBSHOP = ["search[<your query>]", "click[< prev]"]


@pytest.mark.parametrize(
    ("written", "sent"),
    [
        ("go to cabinet 4", "go to cabinet 1"),  # a receptacle the room lacks: the first of its class (ties)
        ("go to shelf 3", "go to shelf 1"),
        ("take laptop 1 from shelf 2", "take pen 1 from shelf 2"),  # an object that is not there
        ("take statue 2 from shelf 2", "take statue 1 from shelf 2"),
        ("examine shelf 1", "examine shelf 2"),
        ("go to countertop 2", "go to countertop 1"),
    ],
)
def test_nearest_maps_an_unlisted_action_to_the_most_similar_listed_one(written: str, sent: str) -> None:
    assert nearest_action(written, ROOM) == sent
    assert match_action(written, ROOM, "nearest") == sent
    assert match_action(written, ROOM, "exact") == written


def test_listed_unparsed_and_template_lists_are_left_alone() -> None:
    assert all(match_action(action, ROOM, "nearest") == action for action in ROOM)
    assert match_action(None, ROOM, "nearest") is None
    assert match_action("search[red shoes]", WEBSHOP, "nearest") == "search[red shoes]"  # a template: free text
    assert match_action("look around", [], "nearest") == "look around"  # no list shown
    assert concrete_list(ROOM) and not concrete_list(WEBSHOP) and not concrete_list([])


def test_the_config_key_reaches_the_rollout_settings(alfworld_config) -> None:  # type: ignore[no-untyped-def]
    assert rollout_settings(alfworld_config("localhost:1")).action_match == "exact"
    nearest = alfworld_config("localhost:1", rollout={"group_size": 2, "action_match": "nearest"})
    assert rollout_settings(nearest).action_match == "nearest"
    with pytest.raises((ConfigError, ValueError), match="action_match"):
        alfworld_config("localhost:1", rollout={"action_match": "closest"})


def test_constrained_allows_the_replies_sft_writes_for_listed_actions() -> None:
    """`AdmissibleReplies`: each listed action's reply as SFT writes it (`action_text`, EOS), narrowed after a
    resumed prefix; a template list or a prefix no reply extends leaves the response free."""
    tokenizer = train_tokenizer(SEED_TEXTS, vocab_size=512)
    replies = AdmissibleReplies(tokenizer, action_format("alfworld").parse, spaced=True)
    allowed = replies.allowed(ROOM)
    assert allowed is not None and len(allowed) == len(ROOM)
    for action, ids in zip(ROOM, allowed, strict=True):
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids[:-1]) == action_text(action, spaced=True)
    prefix = allowed[6][:-3]  # part-way into "take pen 1 from shelf 2"
    rest = replies.allowed(ROOM, prefix)
    assert rest is not None and [*prefix, *allowed[6][len(prefix) :]] in [[*prefix, *r] for r in rest]
    assert all([*prefix, *r] in allowed for r in rest)
    assert replies.allowed(WEBSHOP) is None and replies.allowed([]) is None
    assert replies.allowed(ROOM, [tokenizer.eos_token_id]) is None
    assert match_action("look", ROOM, "constrained") == "look"


def test_constrained_needs_the_hf_backend(alfworld_config) -> None:  # type: ignore[no-untyped-def]
    constrained = alfworld_config("localhost:1", rollout={"group_size": 2, "action_match": "constrained"})
    assert rollout_settings(constrained).action_match == "constrained"
    with pytest.raises((ConfigError, ValueError), match="hf backend only"):
        alfworld_config("localhost:1", rollout={"action_match": "constrained"}, backend={"kind": "vllm"})
