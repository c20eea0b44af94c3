"""The generated catalogue: products and human-style instructions in WebShop's own file layout.

`generate(products, seed)` returns the three documents WebShop reads, as Python data:
`items_shuffle` (the products), `items_ins_v2` (mined attributes per product) and
`items_human_ins` (instructions with their attributes and options per product). Loading them
goes through the same code as the official files (`envhub.envs.webshop.official`), so the
generated catalogue exercises the official path. Deterministic for a given (products, seed).

    python -m envhub.envs.webshop.generator OUT_DIR [--products 3000] [--seed 0]

writes the three files into OUT_DIR; serve them with `envhub serve --env webshop --set
webshop.data=OUT_DIR` (or `WEBSHOP_DATA=OUT_DIR`, or `WebShopKind(data_path=OUT_DIR)`).
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path
from typing import Any

from envhub.envs.webshop.catalog_spec import (
    BRAND_SYLLABLES,
    PRODUCT_TYPES,
    REVIEW_TITLES,
    TITLE_ADJECTIVES,
    ProductType,
)

DEFAULT_PRODUCTS = 3000
FILES = ("items_shuffle.json", "items_ins_v2.json", "items_human_ins.json")

Documents = tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _brand(rng: random.Random) -> str:
    return "".join(rng.sample(BRAND_SYLLABLES, rng.randint(2, 3))).capitalize()


def _bullet(attribute: str, noun: str, rng: random.Random) -> str:
    lead = rng.choice(("Designed to be", "Made to be", "Features", "Enjoy a product that is"))
    return f"{attribute.upper()}: {lead} {attribute}, this {noun.lower()} is built for everyday use."


def _product(kind: ProductType, rng: random.Random, taken: set[str]) -> tuple[dict[str, Any], list[str]]:
    """One product in items_shuffle form, and its mined attributes (items_ins_v2)."""
    brand = _brand(rng)
    traits = rng.sample(kind.attributes, 4)
    listed = traits[:3]  # the fourth shows in the bullet points only, as mined attributes miss some
    adjective = rng.choice(TITLE_ADJECTIVES)
    title = f"{brand} {adjective} {kind.noun}, {traits[0].title()}, {traits[1].title()}"
    options = {}
    for group, values in kind.options.items():
        count = rng.randint(min(2, len(values)), len(values))
        chosen = sorted(rng.sample(range(len(values)), count))
        options[group.title()] = [{"value": values[i].title(), "image": None} for i in chosen]
    low, high = kind.price
    price = round(rng.uniform(low, high), 2)
    pricing = f"${price:.2f}" if rng.random() < 0.85 else f"${price:.2f} - ${price * 1.3:.2f}"
    bullets = [_bullet(trait, kind.noun, rng) for trait in rng.sample(traits, 4)]
    description = (
        f"{title}. From {brand}: a {adjective.lower()} {kind.noun.lower()} that is {traits[2]} and {traits[3]}. "
        f"Backed by {brand}'s satisfaction promise."
    )
    reviews = [
        {
            "title": rng.choice(REVIEW_TITLES),
            "stars": rng.randint(3, 5),
            "review": f"The {kind.noun.lower()} is {rng.choice(traits)}, as promised.",
        }
        for _ in range(rng.randint(1, 3))
    ]
    product = {
        "asin": _asin(rng, taken),
        "name": title,
        "full_description": description,
        "small_description": bullets,
        "pricing": pricing,
        "customization_options": options,
        "category": kind.category,
        "query": kind.query,
        "product_category": kind.path,
        "images": [""],
        "average_rating": round(rng.uniform(3.5, 5.0), 1),
        "reviews": reviews,
    }
    return product, listed


def _instruction(kind: ProductType, product: dict[str, Any], listed: list[str], rng: random.Random) -> dict[str, Any]:
    """One human-style instruction for `product` (items_human_ins form)."""
    attributes = rng.sample(listed, rng.randint(1, min(3, len(listed))))
    groups = product["customization_options"]
    chosen = {group.lower(): rng.choice(values)["value"].lower() for group, values in groups.items()}
    noun = kind.noun.lower()
    template = rng.choice(
        (
            "i'm looking for a {a} {n}",
            "i need a {n} that is {a}",
            "find me a {a} {n}",
            "i want to buy a {n}, it should be {a}",
        )
    )
    text = template.format(a=" and ".join(attributes), n=noun)
    if chosen:
        text += " with " + ", and ".join(f"{group}: {value}" for group, value in chosen.items())
    return {"instruction": text, "instruction_attributes": attributes, "instruction_options": list(chosen.values())}


def generate(products: int = DEFAULT_PRODUCTS, seed: int = 0) -> Documents:
    """(items_shuffle, items_ins_v2, items_human_ins) for `products` products, types dealt round-robin."""
    rng = random.Random(seed)
    taken: set[str] = set()
    items, mined, human = [], {}, {}
    for index in range(products):
        kind = PRODUCT_TYPES[index % len(PRODUCT_TYPES)]
        product, listed = _product(kind, rng, taken)
        items.append(product)
        mined[product["asin"]] = {"attributes": listed}
        human[product["asin"]] = [_instruction(kind, product, listed, rng)]
    rng.shuffle(items)
    return items, mined, human


def write(out: Path, documents: Documents) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, document in zip(FILES, documents, strict=True):
        (out / name).write_text(json.dumps(document))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a generated WebShop catalogue in WebShop's file layout.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--products", type=int, default=DEFAULT_PRODUCTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write(args.out, generate(args.products, args.seed))
    print(f"wrote {args.products} products to {args.out}")


if __name__ == "__main__":
    main()
