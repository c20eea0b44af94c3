"""The SFT reply of an expert action (`action_text`), with and without `prompt.reply_space`."""

from __future__ import annotations

import pytest

from trainer.config import load_config
from trainer.models import train_tokenizer
from trainer.prompts import PromptRenderer, PromptState
from trainer.quickstart.models import config_sft_examples, renderer_for
from trainer.rollout.expert import ExpertEpisode, action_text, expert_texts, sft_examples

PASSAGE = "Doc 1(Title: Sao Tome and Principe) Its capital is Sao Tome. Its calling code is +239."


@pytest.mark.parametrize(
    ("action", "plain", "spaced"),
    [
        ("<answer>Sao Tome</answer>", "<answer>Sao Tome</answer>", "<answer> Sao Tome</answer>"),
        ("<search>capital of X</search>", "<search>capital of X</search>", "<search> capital of X</search>"),
        ("go to desk 1", "<action>go to desk 1</action>", "<action> go to desk 1</action>"),
    ],
)
def test_reply_tags_the_action_and_spaces_it_when_asked(action: str, plain: str, spaced: str) -> None:
    assert action_text(action) == plain
    assert action_text(action, spaced=True) == spaced


def test_a_spaced_answer_is_the_tokens_the_passage_shows() -> None:
    """A byte-level BPE splits `Sao` (after a tag) and ` Sao` (after a space) differently; spaced, the answer's
    tokens are a run of the passage's, which a copying head can reproduce."""
    tokenizer = train_tokenizer([PASSAGE, action_text("<answer>Sao Tome</answer>", spaced=True)] * 4, vocab_size=400)
    passage = tokenizer.encode(PASSAGE, add_special_tokens=False)

    def body(reply: str) -> list[int]:
        return tokenizer.encode(reply, add_special_tokens=False)[1:-1]  # between the tag tokens

    def inside(part: list[int]) -> bool:
        return any(passage[i : i + len(part)] == part for i in range(len(passage)))

    for answer in ("<answer>Sao Tome</answer>", "<answer>+239</answer>"):
        assert not inside(body(action_text(answer)))
        assert inside(body(action_text(answer, spaced=True)))


def test_sft_examples_and_the_tokenizers_corpus_take_the_spaced_reply() -> None:
    episode = ExpertEpisode("t", [PromptState("q?", PASSAGE, [], [])], ["<answer>Sao Tome</answer>"], won=True)
    renderer = PromptRenderer("searchqa", style="compact")
    texts = expert_texts([episode], [renderer], spaced=True)
    assert texts[-1] == "<answer> Sao Tome</answer>"
    tokenizer = train_tokenizer(texts * 4, vocab_size=400)
    ((_, response),) = sft_examples([episode], renderer, tokenizer, spaced=True)
    assert tokenizer.decode(response) == "<answer> Sao Tome</answer><|im_end|>"


@pytest.mark.parametrize("spaced", [False, True])
def test_a_configs_sft_examples_are_spaced_as_its_rollouts_list_replies(spaced: bool) -> None:
    """`trainer sft`, the quickstart's SFT and the ladder take their examples from the config: a `reply_space`
    config trains the spaced reply its rollout's `choice` scores (the unspaced one it never lists)."""
    episode = ExpertEpisode("t", [PromptState("q?", PASSAGE, [], [])], ["<answer>Sao Tome</answer>"], won=True)
    config = load_config("ladder-searchqa.yaml", [f"prompt.reply_space={str(spaced).lower()}"])
    tokenizer = train_tokenizer(expert_texts([episode], [renderer_for(config)], spaced=True) * 4, vocab_size=400)
    ((_, response),) = config_sft_examples(config, [episode], tokenizer)
    expected = action_text("<answer>Sao Tome</answer>", spaced=spaced)
    assert tokenizer.decode(response) == f"{expected}<|im_end|>"
