"""The nouns of a product title, for the product-type factor of the reward.

WebShop tags titles with spaCy's `en_core_web_sm` and keeps the tokens tagged NOUN or PROPN.
`title_nouns` does the same when an English spaCy pipeline is installed (`en_core_web_sm`,
else any installed `en_core_web_*`). Without one it applies a documented rule instead: the
lowercased alphabetic words of two or more letters that are not English function words,
colour words, size words or common product adjectives (`NOT_NOUNS`). On the generated
catalogue, whose titles are built from known nouns and adjectives, the two agree on what
matters for the reward: the same product's title always matches itself fully.
`NOUN_TAGGER` names the method in use; it is part of the kind's version, because rewards
can differ between the two.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable

from envhub.envs.webshop.normalize import COLOR_SET


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


FUNCTION_WORDS = _words(
    "a about above after all also an and any are as at be been but by can each for from has have in into is it "
    "its just more most no not of off on one only or other our out over per so such than that the their them "
    "then there these they this those through to too under up very was we were what when which while who will "
    "with without you your"
)
SIZE_WORDS = _words(
    "small medium large x-large xx-large xl xxl xs mini big extra regular tall short long wide narrow petite plus "
    "queen king twin full pack count ounce ounces oz fl lb lbs inch inches ft cm mm ml size"
)
PRODUCT_ADJECTIVES = _words(
    "new premium organic soft lightweight portable classic modern vintage durable heavy duty waterproof wireless "
    "fast quick easy best high quality professional comfortable elegant stylish cute casual slim adjustable "
    "compact ultra super deluxe original essential natural fresh healthy gourmet luxury everyday sturdy rustic sleek "
    "smart mens womens men's women's unisex kids"
)
NOT_NOUNS = FUNCTION_WORDS | SIZE_WORDS | PRODUCT_ADJECTIVES | frozenset(COLOR_SET)
"""Words the fallback rule never counts as nouns."""

_WORD_PATTERN = re.compile(r"[a-z][a-z'-]*[a-z]")


def rule_nouns(title: str) -> list[str]:
    """The fallback rule: alphabetic words (2+ letters) of `title` not in `NOT_NOUNS`, lowercased."""
    return [word for word in _WORD_PATTERN.findall(title.lower()) if word not in NOT_NOUNS]


def _spacy_pipeline_name() -> str | None:
    """The installed English spaCy pipeline to use, or None."""
    if importlib.util.find_spec("spacy") is None:
        return None
    for name in ("en_core_web_sm", "en_core_web_md", "en_core_web_lg", "en_core_web_trf"):
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def _make_tagger() -> tuple[str, Callable[[str], list[str]]]:
    name = _spacy_pipeline_name()
    if name is None:
        return "rule", rule_nouns
    import spacy

    nlp = spacy.load(name, disable=["parser", "ner", "lemmatizer"])

    def spacy_nouns(title: str) -> list[str]:
        return [token.text.lower() for token in nlp(title) if token.pos_ in ("NOUN", "PROPN")]

    return f"spacy-{name}-{spacy.__version__}", spacy_nouns


NOUN_TAGGER, _tag = _make_tagger()
"""How nouns are found here: "rule", or "spacy-<pipeline>-<version>"."""


@functools.lru_cache(maxsize=65536)
def title_nouns(title: str) -> tuple[str, ...]:
    """The nouns of `title`, lowercased, in order (cached: titles repeat across episodes)."""
    return tuple(_tag(title))
