"""WebShop's reward rules, each on hand-worked cases (envhub.envs.webshop.reward)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from envhub.envs.webshop.normalize import normalize_color
from envhub.envs.webshop.nouns import NOUN_TAGGER, rule_nouns
from envhub.envs.webshop.records import Goal, Product
from envhub.envs.webshop.reward import fuzzy_match, fuzzy_score, is_success, purchase_reward, type_factor

LIPSTICK = Product(
    asin="B000000001",
    title="Belox Premium Matte Lipstick, Long Lasting",
    category="beauty",
    query="lipstick",
    product_category="Beauty › Makeup › Lips › Lipstick",
    attributes=("long lasting", "vegan"),
    bullets=("CRUELTY FREE: never tested on animals.",),
    description="A matte lipstick.",
    options={"color": ("ruby red", "navy blue", "dark navy")},
    price=20.0,
    price_tag="$20.0",
)
GOAL = Goal(
    asin=LIPSTICK.asin,
    instruction="i need a long lasting, cruelty free lipstick with color: blue, and price lower than 30.00 dollars",
    attributes=("long lasting", "cruelty free"),
    options=("blue",),
    price_upper=30.0,
    query="lipstick",
    product_category=LIPSTICK.product_category,
    name=LIPSTICK.title,
)


def test_everything_matched_is_success() -> None:
    # attributes 2 (one listed, one in the bullets) + option 1 + price 1, over 2 + 1 + 1
    reward = purchase_reward(LIPSTICK, GOAL, 20.0, {"color": "navy blue"})
    assert reward.value == 1.0 and is_success(reward.value)
    assert (reward.attributes_matched, reward.options_matched, reward.price_ok) == (2, 1, True)


def test_attribute_matches_fuzzily_or_as_a_substring_of_the_texts() -> None:
    assert purchase_reward(LIPSTICK, replace(GOAL, attributes=("long-lasting",)), 20.0, {}).attributes_matched == 1
    bare = replace(LIPSTICK, bullets=())  # "cruelty free" was only in the bullet points
    reward = purchase_reward(bare, GOAL, 20.0, {"color": "navy blue"})
    assert reward.attributes_matched == 1 and reward.value == pytest.approx(3 / 4)
    in_description = replace(bare, description="cruelty free formula")
    assert purchase_reward(in_description, GOAL, 20.0, {}).attributes_matched == 2


def test_fuzzy_threshold_is_on_the_rounded_score_like_thefuzz() -> None:
    assert fuzzy_score("Machine Wash", "machine washable") == 86 and fuzzy_match("machine wash", "machine washable")
    # raw token_set_ratio is 85.1: above 85, but thefuzz rounds it to 85, which is not
    assert fuzzy_score("x" * 27, "x" * 20) == 85 and not fuzzy_match("x" * 27, "x" * 20)
    assert fuzzy_score("long lasting", "long sleeve") < 85
    assert fuzzy_score("", "vegan") == 0


def test_options_are_colour_normalised_first() -> None:
    assert normalize_color("navy blue") == "blue"  # "blue" comes before "navy" in WebShop's list
    assert normalize_color("dark navy") == "dark"
    assert normalize_color("x-large") == "x-large"
    assert purchase_reward(LIPSTICK, GOAL, 20.0, {"color": "navy blue"}).options_matched == 1
    missed = purchase_reward(LIPSTICK, GOAL, 20.0, {"color": "dark navy"})
    assert missed.options_matched == 0 and missed.value == pytest.approx(3 / 4)
    assert purchase_reward(LIPSTICK, GOAL, 20.0, {}).value == pytest.approx(3 / 4)


def test_price_above_budget_loses_its_share() -> None:
    reward = purchase_reward(LIPSTICK, GOAL, 30.01, {"color": "navy blue"})
    assert not reward.price_ok and reward.value == pytest.approx(3 / 4)
    assert purchase_reward(LIPSTICK, GOAL, 30.0, {"color": "navy blue"}).price_ok  # at the budget is within it


def test_rule_nouns_drop_function_words_colours_sizes_and_adjectives() -> None:
    assert rule_nouns("Belox Premium Matte Lipstick, Long Lasting") == ["belox", "matte", "lipstick", "lasting"]
    assert rule_nouns("Red Large Cotton T-Shirt for Men") == ["cotton", "t-shirt", "men"]


@pytest.mark.skipif(NOUN_TAGGER != "rule", reason="hand-worked with the rule; spaCy tags differently")
def test_type_factor_steps() -> None:
    other = replace(LIPSTICK, query="nail polish", product_category="Beauty › Nails")
    # goal nouns: belox matte lipstick lasting (4); the query matches: 1
    assert type_factor(LIPSTICK, GOAL).factor == 1.0
    # no query match, categories share one level, 1 of 4 nouns = 0.25 > 0.2: still 1
    assert type_factor(replace(other, title="Lipstick Case"), GOAL).factor == 1.0
    # 1 of 5 nouns = 0.2 (not above 0.2) and nothing else matches: 0.5
    five = replace(GOAL, name="Belox Matte Lipstick Lasting Gloss")
    assert type_factor(replace(other, title="Lipstick Case"), five).factor == 0.5
    # two levels shared is a category match: back to 1
    near = replace(other, product_category="Beauty › Makeup › Nails")
    assert type_factor(replace(near, title="Lipstick Case"), five).factor == 1.0
    # 1 of 11 nouns < 0.1: 0.1, whatever else matches
    eleven = replace(GOAL, name="Belox Matte Lipstick Lasting Gloss Tube Stick Balm Kit Box Set")
    assert type_factor(replace(LIPSTICK, title="Lipstick"), eleven).factor == 0.1
    # no noun in common: 0, and so is the whole reward
    polish = replace(LIPSTICK, title="Nail Polish Kit")
    assert type_factor(polish, GOAL).factor == 0.0
    assert purchase_reward(polish, GOAL, 20.0, {"color": "navy blue"}).value == 0.0
    # a goal title without nouns scores 0.2: 0.5 without a query or category match
    assert type_factor(other, replace(GOAL, name="Premium Red")).factor == 0.5


@pytest.mark.skipif(NOUN_TAGGER != "rule", reason="hand-worked with the rule; spaCy tags differently")
def test_type_factor_scales_the_sum() -> None:
    other = replace(LIPSTICK, query="nail polish", product_category="Beauty › Nails", title="Lipstick Case")
    five = replace(GOAL, name="Belox Matte Lipstick Lasting Gloss")
    # attributes: "long lasting" is not in the new title, but is listed: 2; option 1; price 1 -> 4/4 * 0.5
    assert purchase_reward(other, five, 20.0, {"color": "navy blue"}).value == pytest.approx(0.5)
