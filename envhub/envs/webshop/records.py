"""The two records WebShop is made of: a product of the catalogue and a goal (one task)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Review:
    """One customer review shown on the Reviews page."""

    title: str
    score: int
    body: str


@dataclass(frozen=True)
class Product:
    """One product as the pages show it and the reward reads it (WebShop's field meanings)."""

    asin: str
    """Ten-character id, shown upper-case on the results page."""
    title: str
    category: str
    """Top category: beauty, food, fashion, furniture or electronics."""
    query: str
    """The search query the product was collected under (its product type)."""
    product_category: str
    """Category path, levels separated by " › "."""
    attributes: tuple[str, ...]
    """Short attribute phrases ("long lasting", "gluten free")."""
    bullets: tuple[str, ...]
    """Feature bullet points (the Features page)."""
    description: str
    options: dict[str, tuple[str, ...]]
    """Option group (lower-case, e.g. "size") -> its values, in page order."""
    price: float
    """The price a purchase pays (what the reward compares with the budget)."""
    price_tag: str
    """The price as shown ("$12.99", or "$10.0 to $20.0" for a price range)."""
    rating: str = "N.A."
    reviews: tuple[Review, ...] = ()


@dataclass(frozen=True)
class Goal:
    """One task: an instruction and what the reward checks, derived from a target product."""

    asin: str
    """The product the goal was derived from."""
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[str, ...]
    """Option values asked for (e.g. "navy blue", "x-large")."""
    price_upper: float
    query: str
    """The target product's query, category path and title, for the product-type factor."""
    product_category: str
    name: str
    category: str = ""
