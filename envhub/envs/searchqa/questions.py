"""Question sets over the generated passages, named after the seven datasets of the Search-R1 papers.

Single-hop (one search): `nq` (country capital, currency), `triviaqa` (US state capital and
statehood, calling codes), `popqa` (country of a city or a subdivision, state of a county).
Multi-hop: `hotpotqa` (bridge: country by its capital, then a fact of it), `2wikimultihopqa`
(comparison of two countries or cities), `musique` (three hops: city -> country -> capital ->
population), `bamboogle` (compositional: county -> state -> capital). Each candidate names the
passage that each gold search must find; the builder keeps those whose searches do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from envhub.envs.searchqa.facts import City, Facts
from envhub.envs.searchqa.passages import PassageBook, capital_cities

SINGLE_HOP = ("nq", "triviaqa", "popqa")
MULTI_HOP = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
DATASETS = SINGLE_HOP + MULTI_HOP


@dataclass(frozen=True)
class Candidate:
    """A question with the searches that answer it and the passage row each must retrieve."""

    dataset: str
    question: str
    answers: tuple[str, ...]
    searches: tuple[str, ...]
    gold_rows: tuple[int, ...]
    entities: tuple[str, ...]
    """Names the question gives; for multi-hop, no passage may hold them all and the answer."""


def _unique(names: list[str]) -> set[str]:
    return {name for name, count in Counter(names).items() if count == 1}


def candidates(facts: Facts, book: PassageBook) -> Iterator[Candidate]:
    """Every candidate question, dataset by dataset, in a fixed order."""
    rows = book.rows
    countries = [c for c in facts.countries if c.capital]
    unique_capitals = _unique([c.capital for c in countries])
    unique_cities = _unique([c.name for c in facts.cities])
    unique_counties = _unique([c.name for c in facts.counties])
    capitals = capital_cities(facts)
    states = {s.name: s for s in facts.states}
    by_name = {c.name: c for c in facts.countries}

    for c in countries:
        yield Candidate(
            "nq",
            f"What is the capital of {c.name}?",
            (c.capital,),
            (f"capital of {c.name}",),
            (rows["overview", c.name],),
            (c.name,),
        )
        if c.currency:
            yield Candidate(
                "nq",
                f"What is the currency of {c.name}?",
                (c.currency, c.currency_code),
                (f"currency of {c.name}",),
                (rows["economy", c.name],),
                (c.name,),
            )
    for s in facts.states:
        yield Candidate(
            "triviaqa",
            f"What is the capital of the U.S. state of {s.name}?",
            (s.capital,),
            (f"{s.name} state capital",),
            (rows["state", s.name],),
            (s.name,),
        )
        yield Candidate(
            "triviaqa",
            f"In what year was {s.name} admitted to the Union?",
            (str(s.statehood_year),),
            (f"{s.name} admitted to the Union",),
            (rows["state", s.name],),
            (s.name,),
        )
    for c in countries:
        if c.phone:
            yield Candidate(
                "triviaqa",
                f"What is the international calling code of {c.name}?",
                (f"+{c.phone}", c.phone),
                (f"calling code of {c.name}",),
                (rows["economy", c.name],),
                (c.name,),
            )
    for city in facts.cities:
        if city.name in unique_cities:
            yield Candidate(
                "popqa",
                f"In which country is the city of {city.name}?",
                (city.country,),
                (f"{city.name} city",),
                (rows["city", str(city.id)],),
                (city.name,),
            )
    for county in facts.counties:
        if county.name in unique_counties and county.state in states:
            answers = (county.state, states[county.state].abbr)
            yield Candidate(
                "popqa",
                f"In which U.S. state is {county.name}?",
                answers,
                (county.name,),
                (rows["county", county.fips],),
                (county.name,),
            )

    for c in countries:
        if c.capital not in unique_capitals:
            continue
        first = (f"{c.capital} capital city",)
        if c.currency:
            yield Candidate(
                "hotpotqa",
                f"What is the currency of the country whose capital is {c.capital}?",
                (c.currency, c.currency_code),
                (*first, f"currency of {c.name}"),
                (rows["overview", c.name], rows["economy", c.name]),
                (c.capital,),
            )
        yield Candidate(
            "hotpotqa",
            f"What is the population of the country whose capital is {c.capital}?",
            (f"{c.population:,}", str(c.population)),
            (*first, f"population of {c.name}"),
            (rows["overview", c.name], rows["people", c.name]),
            (c.capital,),
        )
    for city in facts.cities:
        if city.name in unique_cities and city.population >= 500_000 and city.country in by_name:
            country = by_name[city.country]
            yield Candidate(
                "hotpotqa",
                f"On which continent is the country where {city.name} lies?",
                (country.continent,),
                (f"{city.name} city", country.name),
                (rows["city", str(city.id)], rows["overview", country.name]),
                (city.name,),
            )

    for c in facts.countries:
        for other in c.neighbours:
            b = by_name[other]
            if c.name < b.name and c.population != b.population:
                larger = c if c.population > b.population else b
                yield Candidate(
                    "2wikimultihopqa",
                    f"Which country has the larger population, {c.name} or {b.name}?",
                    (larger.name,),
                    (f"population of {c.name}", f"population of {b.name}"),
                    (rows["people", c.name], rows["people", b.name]),
                    (c.name, b.name),
                )
    yield from _city_comparisons(facts, book, unique_cities)

    for city in facts.cities:
        capital = capitals.get(city.country)
        if city.name in unique_cities and capital is not None and capital.id != city.id and city.population >= 100_000:
            yield Candidate(
                "musique",
                f"What is the population of the capital of the country where {city.name} is located?",
                (f"{capital.population:,}", str(capital.population)),
                (f"{city.name} city", f"capital of {city.country}", f"{capital.name} {city.country} population"),
                (rows["city", str(city.id)], rows["overview", city.country], rows["city", str(capital.id)]),
                (city.name,),
            )

    for county in facts.counties:
        state = states.get(county.state)
        if county.name in unique_counties and state is not None:
            yield Candidate(
                "bamboogle",
                f"What is the capital of the U.S. state that {county.name} is in?",
                (state.capital,),
                (county.name, f"{state.name} state capital"),
                (rows["county", county.fips], rows["state", state.name]),
                (county.name,),
            )
    for c in countries:
        if c.capital in unique_capitals and c.phone:
            yield Candidate(
                "bamboogle",
                f"What is the calling code of the country whose capital is {c.capital}?",
                (f"+{c.phone}", c.phone),
                (f"{c.capital} capital city", f"calling code of {c.name}"),
                (rows["overview", c.name], rows["economy", c.name]),
                (c.capital,),
            )


def _city_comparisons(facts: Facts, book: PassageBook, unique_cities: set[str]) -> Iterator[Candidate]:
    """Pairs of consecutive uniquely named cities of one country, compared by population."""
    by_country: dict[str, list[City]] = {}
    for city in facts.cities:
        if city.name in unique_cities and city.population >= 50_000:
            by_country.setdefault(city.country, []).append(city)
    for cities in by_country.values():
        for a, b in zip(cities[::2], cities[1::2], strict=False):
            if a.population != b.population:
                larger = a if a.population > b.population else b
                yield Candidate(
                    "2wikimultihopqa",
                    f"Which city has more inhabitants, {a.name} or {b.name}?",
                    (larger.name,),
                    (f"{a.name} city population", f"{b.name} city population"),
                    (book.rows["city", str(a.id)], book.rows["city", str(b.id)]),
                    (a.name, b.name),
                )
