"""Facts written as encyclopedia-style passages (Search-R1's '"Title"\\ntext' contents).

Each fact a question needs sits in its own kind of passage, so that a multi-hop question's
hops are in different passages: a country has an overview (continent, capital, area, largest
city), a demographics, an economy and a geography passage. The largest city in the overview
and the many cities that share a name are the distractors of capital and city questions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from envhub.envs.searchqa.facts import City, Country, County, Facts, Language, State, Subdivision


@dataclass
class PassageBook:
    """Passages in order, with the row of the passage that states each keyed fact."""

    titles: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    rows: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, title: str, text: str, key: tuple[str, str] | None = None) -> int:
        self.titles.append(title)
        self.texts.append(text)
        row = len(self.texts) - 1
        if key is not None:
            self.rows[key] = row
        return row

    def contents(self, row: int) -> str:
        return f'"{self.titles[row]}"\n{self.texts[row]}'

    def rows_json(self) -> list[dict[str, object]]:
        return [{"id": str(row), "contents": self.contents(row)} for row in range(len(self.texts))]


def _join(names: tuple[str, ...] | list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def largest_cities(cities: tuple[City, ...]) -> dict[str, City]:
    """The most populous listed city of each country."""
    best: dict[str, City] = {}
    for city in cities:
        if city.country not in best or city.population > best[city.country].population:
            best[city.country] = city
    return best


def capital_cities(facts: Facts) -> dict[str, City]:
    """Country name -> its capital's city record (the most populous namesake in that country)."""
    by_name: dict[tuple[str, str], list[City]] = defaultdict(list)
    for city in facts.cities:
        by_name[(city.country, city.name)].append(city)
    out = {}
    for country in facts.countries:
        found = by_name.get((country.name, country.capital))
        if found:
            out[country.name] = max(found, key=lambda c: (c.population, -c.id))
    return out


def _country(book: PassageBook, c: Country, largest: City | None) -> None:
    overview = f"{c.name} is a country in {c.continent}."
    if c.capital:
        overview += f" Its capital is {c.capital}."
    overview += f" It covers an area of {c.area_km2:,.0f} square kilometres."
    if largest is not None and largest.name != c.capital:
        overview += f" Its largest city is {largest.name}."
    book.add(c.name, overview, ("overview", c.name))
    people = f"{c.name} has a population of {c.population:,}."
    if c.languages:
        people += f" Languages spoken there include {_join(c.languages)}."
    book.add(f"Demographics of {c.name}", people, ("people", c.name))
    economy = f"The currency of {c.name} is the {c.currency} ({c.currency_code})." if c.currency else ""
    if c.phone:
        economy += f" Its international calling code is +{c.phone}."
    if c.tld:
        economy += f" Its internet country code top-level domain is {c.tld}."
    book.add(f"Economy of {c.name}", economy.strip(), ("economy", c.name))
    borders = (
        f"{c.name} shares land borders with {_join(c.neighbours)}."
        if c.neighbours
        else f"{c.name} has no land borders with other countries."
    )
    book.add(f"Geography of {c.name}", borders, ("geography", c.name))


def _city(book: PassageBook, city: City, capital_of: str | None) -> None:
    text = f"{city.name} is a city in {city.country} with a population of {city.population:,}."
    if capital_of:
        text += f" It is the capital of {capital_of}."
    text += (
        f" It lies at latitude {city.latitude:.2f} and longitude {city.longitude:.2f}, "
        f"in the {city.timezone} time zone."
    )
    book.add(city.name, text, ("city", str(city.id)))


def _state(book: PassageBook, s: State) -> None:
    text = (
        f"{s.name} ({s.abbr}) is a U.S. state. It was admitted to the Union in {s.statehood_year}. "
        f"Its capital is {s.capital}. Time zones: {_join(list(s.time_zones))}."
    )
    book.add(s.name, text, ("state", s.name))


def _county(book: PassageBook, c: County) -> None:
    book.add(
        c.name, f"{c.name} is a county in the U.S. state of {c.state}. Its FIPS code is {c.fips}.", ("county", c.fips)
    )


def _subdivision(book: PassageBook, s: Subdivision) -> None:
    text = f"{s.name} is a {s.type.lower()} of {s.country}. Its ISO 3166-2 code is {s.code}."
    book.add(s.name, text, ("subdivision", s.code))


def _language(book: PassageBook, lang: Language) -> None:
    status = "a living language" if lang.living else "a language that is no longer spoken"
    book.add(f"{lang.name} language", f"{lang.name} is {status}. Its ISO 639-3 code is {lang.code}.")


def write_passages(facts: Facts) -> PassageBook:
    """Every fact as passages, in a fixed order."""
    book = PassageBook()
    largest = largest_cities(facts.cities)
    capitals = {city.id: country for country, city in capital_cities(facts).items()}
    for country in facts.countries:
        _country(book, country, largest.get(country.name))
    for city in facts.cities:
        _city(book, city, capitals.get(city.id))
    for state in facts.states:
        _state(book, state)
    for county in facts.counties:
        _county(book, county)
    for subdivision in facts.subdivisions:
        _subdivision(book, subdivision)
    for language in facts.languages:
        _language(book, language)
    return book
