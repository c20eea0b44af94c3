"""WebShop's colour normalisation, used when goal and purchased options are compared.

A colour option is reduced to the first base colour of `COLOR_SET` (in its alphabetical
order) that occurs in it as a substring, so "navy blue" and "blue" agree ("blue" comes
first). Text with no base colour is left as it is. The vocabulary is WebShop's own.
"""

from __future__ import annotations

COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)  # fmt: skip
"""WebShop's base colours, in the order they are tried."""


def normalize_color(text: str) -> str:
    """The first base colour contained in `text`, or `text` unchanged when none is."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text
