"""What the generated catalogue is made of: WebShop's five top categories, product types in each.

Each `ProductType` gives the query a product is filed under (WebShop's `query`), its category
path, the nouns its titles use, the attribute phrases its products draw from (phrases of the
kind WebShop mined: "long lasting", "gluten free"), its option groups and a price range.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    category: str
    query: str
    path: str
    noun: str
    """Title noun phrase, e.g. "Shampoo"."""
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]


COLORS = ("black", "white", "navy blue", "heather grey", "red", "pink", "olive green", "beige", "burgundy", "teal")
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
SHOE_SIZES = ("6", "7", "7.5", "8", "8.5", "9", "10", "11", "12")
PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 6", "pack of 12")

_B = "Beauty & Personal Care"
_F = "Grocery & Gourmet Food"
_C = "Clothing, Shoes & Jewelry"
_H = "Home & Kitchen › Furniture"
_E = "Electronics"

PRODUCT_TYPES: tuple[ProductType, ...] = (
    # beauty
    ProductType("beauty", "shampoo", f"{_B} › Hair Care › Shampoo & Conditioner › Shampoos", "Shampoo",
                ("sulfate free", "paraben free", "natural ingredients", "dry hair", "color treated", "cruelty free",
                 "argan oil", "long lasting"),
                {"size": ("8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz"), "scent": ("lavender", "coconut", "mint",
                 "unscented", "citrus")}, (6, 40)),
    ProductType("beauty", "lipstick", f"{_B} › Makeup › Lips › Lipstick", "Matte Lipstick",
                ("long lasting", "cruelty free", "paraben free", "high pigment", "moisturizing", "vegan",
                 "waterproof formula", "easy apply"),
                {"color": ("ruby red", "nude", "rose pink", "berry", "coral", "plum", "mocha")}, (5, 30)),
    ProductType("beauty", "face moisturizer", f"{_B} › Skin Care › Face › Creams & Moisturizers", "Face Moisturizer",
                ("sensitive skin", "oil free", "hyaluronic acid", "anti aging", "fragrance free", "spf 30",
                 "dermatologist tested", "non comedogenic"),
                {"size": ("1.7 oz", "2.5 oz", "4 oz"), "item package quantity": ("1", "2", "3")}, (9, 60)),
    ProductType("beauty", "nail polish", f"{_B} › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
                "Nail Polish", ("quick dry", "long lasting", "chip resistant", "non toxic", "gel finish", "vegan",
                "high gloss", "easy remove"),
                {"color": ("cherry red", "baby pink", "navy", "lilac", "gold glitter", "black", "white"),
                 "size": ("0.5 fl oz", "set of 6")}, (4, 25)),
    ProductType("beauty", "hair dryer", f"{_B} › Hair Care › Styling Tools › Hair Dryers", "Hair Dryer",
                ("ionic technology", "fast drying", "low noise", "lightweight design", "cool shot", "diffuser included",
                 "travel friendly", "ceramic tourmaline"),
                {"color": ("black", "white", "rose gold", "purple")}, (18, 120)),
    ProductType("beauty", "body wash", f"{_B} › Skin Care › Body › Cleansers › Body Washes", "Body Wash",
                ("dry skin", "natural ingredients", "shea butter", "sulfate free", "dermatologist tested",
                 "paraben free", "rich lather", "cruelty free"),
                {"scent": ("eucalyptus", "vanilla", "sandalwood", "ocean", "unscented"), "size": ("12 fl oz",
                 "16 fl oz", "24 fl oz")}, (5, 28)),
    # food
    ProductType("food", "coffee beans", f"{_F} › Beverages › Coffee, Tea & Cocoa › Coffee › Whole Coffee Beans",
                "Whole Bean Coffee", ("medium roast", "dark roast", "single origin", "fair trade", "usda organic",
                "low acid", "freshly roasted", "kosher certified"),
                {"size": ("12 ounce", "2 pound", "5 pound"), "flavor name": ("original", "french vanilla",
                 "hazelnut", "mocha", "decaf")}, (8, 55)),
    ProductType("food", "green tea", f"{_F} › Beverages › Coffee, Tea & Cocoa › Tea › Green Tea", "Green Tea Bags",
                ("usda organic", "caffeine free", "non gmo", "gluten free", "individually wrapped", "antioxidant rich",
                 "kosher certified", "sugar free"),
                {"flavor name": ("jasmine", "matcha", "lemon ginger", "peppermint", "original"),
                 "size": PACKS[:4]}, (4, 30)),
    ProductType("food", "protein bars", f"{_F} › Snack Foods › Bars › Protein Bars", "Protein Bars",
                ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based",
                 "individually wrapped", "low carb"),
                {"flavor name": ("chocolate chip", "peanut butter", "cookies and cream", "salted caramel", "berry"),
                 "size": ("12 count", "24 count")}, (12, 48)),
    ProductType("food", "potato chips", f"{_F} › Snack Foods › Chips & Crisps › Potato Chips", "Kettle Potato Chips",
                ("gluten free", "non gmo", "kosher certified", "trans fat free", "individually wrapped",
                 "family size", "vegan", "no artificial flavors"),
                {"flavor name": ("sea salt", "barbecue", "salt and vinegar", "jalapeno", "sour cream and onion"),
                 "size": ("1 ounce (pack of 24)", "5 ounce (pack of 8)", "8 ounce (pack of 12)")}, (9, 42)),
    ProductType("food", "olive oil", f"{_F} › Pantry Staples › Cooking & Baking › Oils › Olive Oil",
                "Extra Virgin Olive Oil", ("cold pressed", "usda organic", "non gmo", "first harvest",
                "glass bottle", "kosher certified", "single origin", "gluten free"),
                {"size": ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "1 gallon")}, (8, 60)),
    ProductType("food", "gummy candy", f"{_F} › Snack Foods › Candy & Chocolate › Gummy Candy", "Gummy Bears",
                ("fat free", "gluten free", "vegan", "individually wrapped", "resealable bag", "natural flavors",
                 "sugar free", "kosher certified"),
                {"flavor name": ("assorted fruit", "sour", "cherry", "watermelon"),
                 "size": ("2 pound", "5 pound", "pack of 12")}, (6, 35)),
    # fashion
    ProductType("fashion", "men's t-shirts", f"{_C} › Men › Clothing › Shirts › T-Shirts", "Men's Crew Neck T-Shirt",
                ("machine wash", "cotton blend", "short sleeve", "regular fit", "moisture wicking", "tagless",
                 "slim fit", "pre shrunk"),
                {"color": COLORS, "size": APPAREL_SIZES}, (8, 35)),
    ProductType("fashion", "women's running shoes", f"{_C} › Women › Shoes › Athletic › Running",
                "Women's Running Shoes",
                ("non slip", "rubber sole", "arch support", "breathable mesh", "lightweight", "memory foam",
                 "lace up", "shock absorbing"),
                {"color": COLORS[:7], "size": SHOE_SIZES}, (30, 130)),
    ProductType("fashion", "women's dresses", f"{_C} › Women › Clothing › Dresses › Casual", "Women's Summer Dress",
                ("machine wash", "short sleeve", "v neck", "loose fit", "polyester spandex", "pockets", "hand wash",
                 "flowy hem"),
                {"color": COLORS, "size": APPAREL_SIZES[:5]}, (18, 60)),
    ProductType("fashion", "men's jeans", f"{_C} › Men › Clothing › Jeans", "Men's Straight Leg Jeans",
                ("machine wash", "relaxed fit", "button closure", "stretch denim", "regular fit", "cotton blend",
                 "five pocket", "zipper fly"),
                {"color": ("dark wash", "light wash", "black", "stonewash blue"),
                 "size": ("30w x 30l", "32w x 32l", "34w x 32l", "36w x 34l")}, (22, 80)),
    ProductType("fashion", "hoodies", f"{_C} › Men › Clothing › Fashion Hoodies & Sweatshirts", "Pullover Hoodie",
                ("fleece lined", "machine wash", "drawstring closure", "kangaroo pocket", "long sleeve",
                 "cotton blend", "relaxed fit", "ribbed cuffs"),
                {"color": COLORS, "size": APPAREL_SIZES}, (20, 65)),
    ProductType("fashion", "sandals", f"{_C} › Women › Shoes › Sandals › Flat Sandals", "Women's Flat Sandals",
                ("open toe", "ankle strap", "non slip", "rubber sole", "memory foam", "arch support", "vegan leather",
                 "adjustable buckle"),
                {"color": ("black", "brown", "beige", "white", "gold"), "size": SHOE_SIZES[:7]}, (15, 70)),
    # furniture
    ProductType("furniture", "office chair", f"{_H} › Home Office Furniture › Home Office Chairs › Desk Chairs",
                "Ergonomic Office Chair", ("lumbar support", "adjustable height", "easy assemble", "mesh back",
                "swivel base", "padded armrests", "heavy duty", "high back"),
                {"color": ("black", "grey", "white", "blue")}, (60, 320)),
    ProductType("furniture", "bookshelf", f"{_H} › Living Room Furniture › Bookcases", "Bookshelf",
                ("easy assemble", "wood finish", "5 tier", "space saving", "anti tip", "metal frame",
                 "storage space", "industrial style"),
                {"color": ("rustic brown", "black", "white", "walnut", "grey oak")}, (40, 200)),
    ProductType("furniture", "coffee table", f"{_H} › Living Room Furniture › Tables › Coffee Tables", "Coffee Table",
                ("easy assemble", "storage shelf", "lift top", "solid wood", "mid century", "tempered glass",
                 "round shape", "metal legs"),
                {"color": ("walnut", "black", "white", "natural oak", "espresso")}, (50, 260)),
    ProductType("furniture", "bed frame", f"{_H} › Bedroom Furniture › Beds, Frames & Bases › Bed Frames",
                "Platform Bed Frame", ("no box spring needed", "easy assemble", "under bed storage", "metal frame",
                "wood slats", "noise free", "upholstered headboard", "heavy duty"),
                {"size": ("twin", "full", "queen", "king"), "color": ("black", "grey", "white", "brown")}, (90, 420)),
    ProductType("furniture", "sofa", f"{_H} › Living Room Furniture › Sofas & Couches", "Sofa Couch",
                ("living room", "easy assemble", "high density foam", "removable cushions", "solid wood",
                 "mid century", "tool free", "velvet fabric"),
                {"color": ("grey", "navy blue", "beige", "green", "dark grey")}, (180, 900)),
    ProductType("furniture", "nightstand", f"{_H} › Bedroom Furniture › Nightstands", "Nightstand",
                ("easy assemble", "storage drawer", "charging station", "solid wood", "bedroom", "space saving",
                 "open shelf", "rustic style"),
                {"color": ("white", "black", "rustic brown", "grey"), "size": ("1 drawer", "2 drawers",
                 "set of 2")}, (30, 150)),
    # electronics
    ProductType("electronics", "wireless earbuds", f"{_E} › Headphones, Earbuds & Accessories › Earbud Headphones",
                "Wireless Earbuds", ("noise cancelling", "bluetooth 5.3", "long battery life", "water resistant",
                "charging case", "hands free", "touch control", "stereo sound"),
                {"color": ("black", "white", "navy blue", "pink")}, (20, 150)),
    ProductType("electronics", "usb c cable", f"{_E} › Computers & Accessories › Cables & Accessories › USB Cables",
                "USB C Cable", ("fast charging", "braided nylon", "high speed", "data sync", "durable design",
                "aluminum connector", "tangle free", "usb 3.1"),
                {"size": ("3 ft", "6 ft", "10 ft"), "color": ("black", "white", "grey", "red"),
                 "item package quantity": ("1", "2", "3")}, (6, 25)),
    ProductType("electronics", "bluetooth speaker", f"{_E} › Portable Audio & Video › Portable Speakers",
                "Portable Bluetooth Speaker", ("water resistant", "long battery life", "stereo sound",
                "built in microphone", "easy carry", "deep bass", "usb charging", "hands free"),
                {"color": ("black", "blue", "red", "grey", "green")}, (25, 180)),
    ProductType("electronics", "phone case", f"{_E} › Cell Phones & Accessories › Cases, Holsters & Sleeves › Cases",
                "Phone Case", ("shockproof", "slim fit", "wireless charging compatible", "raised edges",
                "anti scratch", "easy install", "full body protection", "clear back"),
                {"color": ("clear", "black", "navy blue", "pink", "green"), "size": ("6.1 inch", "6.7 inch")},
                (8, 40)),
    ProductType("electronics", "hdmi cable", f"{_E} › Television & Video › Accessories › Cables › HDMI Cables",
                "HDMI Cable", ("high speed", "4k resolution", "gold plated", "braided nylon", "ethernet support",
                "hdr support", "easy install", "durable design"),
                {"size": ("3 ft", "6 ft", "10 ft", "15 ft"), "item package quantity": ("1", "2")}, (6, 30)),
    ProductType("electronics", "wireless mouse", f"{_E} › Computers & Accessories › Computer Accessories › Mice",
                "Wireless Mouse", ("ergonomic design", "silent click", "long battery life", "usb receiver",
                "adjustable dpi", "plug and play", "rechargeable battery", "easy carry"),
                {"color": ("black", "white", "grey", "pink", "blue")}, (9, 60)),
)  # fmt: skip
"""Six product types in each of WebShop's five top categories."""

BRAND_SYLLABLES = ("zen", "lu", "mar", "ko", "vi", "tra", "no", "bel", "sa", "quo", "ri", "den", "fa", "ly", "ox")
TITLE_ADJECTIVES = ("Premium", "Classic", "Modern", "Everyday", "Deluxe", "Essential", "Ultra", "Original")
REVIEW_TITLES = ("Great value", "Works as described", "Would buy again", "Decent", "Not bad", "Love it")
