"""The built-in offline data: a generated world of fictional people, places and companies.

Nothing here exists outside this module, so a model cannot answer from memory: it has to search.
:func:`build_world` makes, from a seed, countries (with capitals), cities (with a country, a river
and a founding year), companies (with a founder, a headquarters city, an industry and a founding
year) and people (with a birthplace, a birth year, a profession and an employer). Each entity is
described by one passage (people by two: early life and career), in the wiki-passage layout
(``"Title"`` on the first line, then the text).

Questions come in two kinds: one-hop (the answer is in the passage of the entity the question
names: "In which city was Oren Valdris born?") and two-hop (the question names one entity and
asks about another reached through it: "In which country was Oren Valdris born?" needs the
person's passage for the city, then the city's passage for the country). Only questions with a
unique answer are made. The world is fully determined by ``(seed, size)``; the retrieval server
and the env rebuild it independently and agree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from ragen_env_searchqa.data import Passage, Question

_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "h", "k", "l", "m", "n", "p", "qu", "r", "s", "st", "t", "th", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "x", "v"]
_PROFESSIONS = ["botanist", "architect", "cartographer", "violinist", "chemist", "novelist", "engineer", "painter",
                "astronomer", "sculptor", "linguist", "surgeon", "economist", "poet", "glassblower", "historian"]
_INDUSTRIES = ["shipbuilding", "textiles", "optics", "printing", "clockmaking", "mining", "brewing", "railways",
               "pharmaceuticals", "ceramics", "aviation", "publishing"]
_SUFFIX_CITY = ["", "", "burg", "ford", "ia", "mont", "haven", "stad"]
_SUFFIX_COMPANY = ["Works", "Industries", "and Sons", "Company", "Guild", "Group", "Foundry", "Trading House"]


@dataclass(frozen=True)
class World:
    """The generated facts, the passages describing them and the questions about them."""

    passages: tuple[Passage, ...]
    questions: tuple[Question, ...]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)).capitalize()


def _names(rng: random.Random, n: int, make: object) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        name = make()  # type: ignore[operator]
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


@lru_cache(maxsize=4)
def build_world(seed: int = 0, size: int = 400) -> World:
    """The world of ``size`` people (and size/6 cities, size/5 companies, size/30 countries)."""
    rng = random.Random(f"searchqa-world-{seed}-{size}")
    n_countries, n_cities, n_companies = max(3, size // 30), max(6, size // 6), max(5, size // 5)
    all_names = _names(rng, n_countries + n_cities + n_companies + size + 2 * n_cities, lambda: _word(rng, rng.choice((2, 3))))
    take = iter(all_names)
    countries = [next(take) + rng.choice(["ia", "land", "ora", "ica", ""]) for _ in range(n_countries)]
    cities = [next(take) + rng.choice(_SUFFIX_CITY) for _ in range(n_cities)]
    rivers = [next(take) for _ in range(n_cities)]
    city_country = [i % n_countries for i in range(n_cities)]
    rng.shuffle(city_country)
    city_founded = [rng.randint(900, 1700) for _ in range(n_cities)]
    city_river = [rng.randrange(len(rivers) // 2) for _ in range(n_cities)]  # rivers shared by cities
    capitals = {c: next(i for i, cc in enumerate(city_country) if cc == c) for c in range(n_countries) if c in city_country}
    surnames = [next(take) for _ in range(max(2, size // 3))]  # families: shared surnames make search harder
    first = _names(rng, size, lambda: _word(rng, 2))
    people = _names(rng, size, lambda: f"{rng.choice(first)} {rng.choice(surnames)}")
    companies = [f"{next(take)} {rng.choice(_SUFFIX_COMPANY)}" for _ in range(n_companies)]

    born_in = [rng.randrange(n_cities) for _ in range(size)]
    born_year = [rng.randint(1800, 1960) for _ in range(size)]
    profession = [rng.choice(_PROFESSIONS) for _ in range(size)]
    works_for = [rng.randrange(n_companies) for _ in range(size)]
    founders = rng.sample(range(size), n_companies)
    company_city = [rng.randrange(n_cities) for _ in range(n_companies)]
    company_year = [rng.randint(1820, 1990) for _ in range(n_companies)]
    company_industry = [rng.choice(_INDUSTRIES) for _ in range(n_companies)]

    passages: list[Passage] = []

    def add(title: str, text: str) -> None:
        passages.append(Passage(str(len(passages)), title, text))

    for c, name in enumerate(countries):
        cap = cities[capitals[c]] if c in capitals else "no city"
        add(name, f"{name} is a country whose capital is {cap}. Its cities include "
                  f"{', '.join(cities[i] for i, cc in enumerate(city_country) if cc == c)}.")
    for i, name in enumerate(cities):
        add(name, f"{name} is a city in {countries[city_country[i]]}, founded in {city_founded[i]}. "
                  f"The river {rivers[city_river[i]]} flows through {name}.")
    for k, name in enumerate(companies):
        f = founders[k]
        add(name, f"{name} is {_a(company_industry[k])} company founded in {company_year[k]} by {people[f]}. "
                  f"Its headquarters are in {cities[company_city[k]]}.")
    for p, name in enumerate(people):
        add(name, f"{name} (born {born_year[p]}) is {_a(profession[p])}. {name} was born in {cities[born_in[p]]} "
                  f"and grew up near the river {rivers[city_river[born_in[p]]]}.")
        add(f"{name} (career)", f"{name} worked as {_a(profession[p])} for {companies[works_for[p]]}, "
                                f"{_a(company_industry[works_for[p]])} company.")

    questions: list[Question] = []

    def ask(text: str, answer: str, hops: int) -> None:
        questions.append(Question(text, (answer,), f"world-{hops}hop"))

    founded_by = {f: k for k, f in enumerate(founders)}
    for p, name in enumerate(people):
        ask(f"In which city was {name} born?", cities[born_in[p]], 1)
        ask(f"In what year was {name} born?", str(born_year[p]), 1)
        ask(f"Which company did {name} work for?", companies[works_for[p]], 1)
        ask(f"In which country was {name} born?", countries[city_country[born_in[p]]], 2)
        ask(f"Who founded the company that {name} worked for?", people[founders[works_for[p]]], 2)
        ask(f"In what year was the city where {name} was born founded?", str(city_founded[born_in[p]]), 2)
        if p in founded_by:
            ask(f"In which city are the headquarters of the company founded by {name}?", cities[company_city[founded_by[p]]], 2)
    for k, name in enumerate(companies):
        ask(f"Who founded {name}?", people[founders[k]], 1)
        ask(f"In which country are the headquarters of {name}?", countries[city_country[company_city[k]]], 2)
    for i, name in enumerate(cities):
        ask(f"In which country is the city of {name}?", countries[city_country[i]], 1)
    order = list(range(len(questions)))
    rng.shuffle(order)
    return World(tuple(passages), tuple(questions[i] for i in order))


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word
