"""The generated catalogue, its goals, and WebShop's official file layout."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from envhub.core.session import Session
from envhub.envs.webshop.catalog import NO_BUDGET, Catalog, budget
from envhub.envs.webshop.generator import generate, main
from envhub.envs.webshop.kind import GENERATED_SPLITS, WebShopKind, load_catalog
from envhub.envs.webshop.search import SearchIndex


def test_generated_catalogue_covers_the_five_categories() -> None:
    catalog = load_catalog()
    products = list(catalog.products.values())
    assert len(products) == 3000
    assert Counter(p.category for p in products) == {
        c: 600 for c in ("beauty", "food", "fashion", "furniture", "electronics")
    }
    for product in products:
        assert product.title and product.description and len(product.bullets) == 4 and len(product.attributes) == 3
        assert " › " in product.product_category and product.options and product.price > 0
        assert product.price_tag.startswith("$")
    assert {split: len(goals) for split, goals in catalog.goals.items()} == {"test": 128, "train": 2872}
    for goal in [*catalog.goals["test"], *catalog.goals["train"]]:
        product = catalog.products[goal.asin]
        assert set(goal.attributes) <= set(product.attributes)
        offered = {v for values in product.options.values() for v in values}
        assert set(goal.options) <= offered and goal.price_upper > product.price
        if goal.price_upper != NO_BUDGET:  # no budget above $980 (a few sofas)
            assert goal.instruction.endswith(f", and price lower than {goal.price_upper:.2f} dollars")
    assert generate(50, seed=3) == generate(50, seed=3) and generate(50, seed=3) != generate(50, seed=4)


def test_budget_follows_webshop() -> None:
    import random

    rng = random.Random(0)
    for _ in range(50):
        upper, text = budget(23.5, rng)
        assert upper in (40.0, 50.0, 60.0) and text == f", and price lower than {upper:.2f} dollars"
    assert budget(985.0, rng) == (NO_BUDGET, "")  # only $990 is above: no budget


def _official_folder(root: Path) -> Path:
    """A tiny folder in WebShop's layout, with the quirks of the real files."""
    product = {
        "asin": "B07TEST001",
        "name": "Acme Cotton T-Shirt",
        "full_description": "Soft shirt.",
        "small_description": "Machine wash cold",
        "pricing": "$10.99 - $15.00",
        "customization_options": {"Color": [{"value": "Black/White ", "image": "x"}], "Size": None},
        "category": "fashion",
        "query": " T-Shirts ",
        "product_category": "Clothing › Men › Shirts",
        "images": ["x"],
    }
    items = [
        product,
        {**product, "name": "a duplicate asin, skipped"},
        {**product, "asin": "nan"},
        {**product, "asin": "B07TOOLONG99"},
        {**product, "asin": "B07TEST002", "name": "Acme Mug", "pricing": "", "customization_options": None},
    ]
    mined = {"B07TEST001": {"attributes": ["machine wash", "cotton"]}}
    human = {
        "B07TEST001": [
            {"instruction": "i want a machine wash t-shirt.", "instruction_attributes": ["machine wash"],
             "instruction_options": ["black | white"]},
            {"instruction": "no attributes, skipped", "instruction_attributes": [], "instruction_options": []},
        ],
        "B07TEST002": [{"instruction": "a mug", "instruction_attributes": ["mug"], "instruction_options": []}],
    }  # fmt: skip
    folder = root / "official"
    folder.mkdir()
    for name, document in (("items_shuffle_1000.json", items), ("items_ins_v2_1000.json", mined)):
        (folder / name).write_text(json.dumps(document))
    (folder / "items_human_ins.json").write_text(json.dumps(human))
    return folder


def test_official_layout_loads_like_webshop(tmp_path: Path) -> None:
    catalog = Catalog.from_folder(_official_folder(tmp_path))
    assert list(catalog.products) == ["B07TEST001", "B07TEST002"]
    shirt, mug = catalog.products["B07TEST001"], catalog.products["B07TEST002"]
    assert shirt.query == "t-shirts" and shirt.bullets == ("Machine wash cold",)
    assert shirt.options == {"color": ("black | white",)}
    assert shirt.price_tag == "$10.99 to $15.0" and 10.99 <= shirt.price <= 15.0
    assert mug.price_tag == "$100.0" and mug.price == 100.0 and mug.attributes == ("DUMMY_ATTR",) and mug.options == {}
    assert {s: len(g) for s, g in catalog.goals.items()} == {"test": 2, "valid": 0, "train": 0}
    shirt_goal = next(g for g in catalog.goals["test"] if g.asin == shirt.asin)
    assert shirt_goal.instruction.startswith("i want a machine wash t-shirt, and price lower than")
    kind = WebShopKind(data_path=tmp_path / "official")
    task = kind.tasks("test")[catalog.goals["test"].index(shirt_goal)]
    session = Session.start(kind, task)
    while not session.done:
        step = session.step(session.expert_actions()[0])
    assert step.result.won and session.actions[-2:] == ["click[black | white]", "click[buy now]"]


def test_generator_command_writes_the_official_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(tmp_path / "shop"), "--products", "60", "--seed", "5"])
    assert "wrote 60 products" in capsys.readouterr().out
    from_files = Catalog.from_folder(tmp_path / "shop", splits=GENERATED_SPLITS)
    in_memory = Catalog.from_documents(*generate(60, 5), splits=GENERATED_SPLITS)
    assert from_files.fingerprint == in_memory.fingerprint and len(from_files.products) == 60


def test_search_ranks_a_title_first_and_ignores_unknown_words(tmp_path: Path) -> None:
    catalog = Catalog.from_documents(*generate(300, 1), splits=GENERATED_SPLITS)
    index = SearchIndex(catalog, tmp_path / "index")
    for product in list(catalog.products.values())[:20]:
        assert index.search(product.title)[0] == product.asin
    assert index.search("qqqq zzzz") == [] and index.search("") == []
    assert len(index.search("shampoo lipstick shirt coffee tea")) == 50
    again = SearchIndex(catalog, tmp_path / "index")  # loads the saved index
    assert again.search("green tea") == index.search("green tea")
