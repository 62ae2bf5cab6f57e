"""Catalogs and goals: the generated catalog, the real-file loader (on the shared sample), the split.

The real-format sample is read from the shared data folder at test time and never copied into
the repository; its tests skip where the folder is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ragen_env_webshop.catalog import DEFAULT_PRICE, generate_catalog, load_products
from ragen_env_webshop.config import CatalogConfig
from ragen_env_webshop.engine import ShopEngine
from ragen_env_webshop.goals import NO_PRICE_BOUND, PRICE_GRID, GoalSplit, make_goals

from ragen_core.errors import ConfigError

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "webshop-sample"
DOCS = DATA / "documents_100.jsonl"
ATTRS = DATA / "items_ins_v2_1000.json"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared WebShop sample data not available")


def test_generated_catalog_is_seeded_and_prefix_stable():
    a, b = generate_catalog(200, seed=3), generate_catalog(200, seed=3)
    assert a == b
    assert generate_catalog(50, seed=3) == a[:50]  # product i depends only on (seed, i)
    assert generate_catalog(200, seed=4) != a
    assert len({p.asin for p in a}) == 200
    for p in a:
        assert p.instruction and set(p.instruction_attributes) <= set(p.attributes)
        assert all(v == v.lower() for vs in p.options.values() for v in vs)
        assert p.price > 0 and " › " in p.product_category


def test_goals_cover_every_option_combination_with_a_grid_price_bound():
    products = generate_catalog(100, seed=0)
    goals = make_goals(products, seed=0)
    by_asin = {p.asin: p for p in products}
    expected = 0
    for p in products:
        n = 1
        for values in p.options.values():
            n *= len(values)
        expected += n
    assert len(goals) == expected
    for g in goals:
        p = by_asin[g.asin]
        assert g.instruction.startswith(p.instruction)
        assert all(g.options[k] in p.options[k] for k in p.options) and set(g.options) == set(p.options)
        above = [x for x in PRICE_GRID if x > p.price][:4]
        if len(above) >= 2:
            assert g.price_upper in above[1:] and g.instruction.endswith(f", and price lower than {g.price_upper:.2f} dollars")
        else:
            assert g.price_upper == NO_PRICE_BOUND and "price lower" not in g.instruction
    assert make_goals(products, seed=0) == goals  # fixed shuffle and seeded bounds


def test_goal_split_follows_the_spec_blocks():
    split = GoalSplit(4000)
    perm = split.permutation
    assert sorted(perm) == list(range(4000))
    assert split.index(7, "test") == perm[7] and split.index(507, "test") == perm[7]
    assert split.index(3, "val") == perm[503] and split.index(1003, "val") == perm[503]
    assert split.index(5, "train") == perm[1505] and split.index(2510, "train") == perm[1510]  # 1500 + 2510 % 2500
    small = GoalSplit(100)  # a tenth each for test and val, the rest train
    assert small.index(0, "train") == small.permutation[20] and small.index(80, "train") == small.permutation[20]
    with pytest.raises(ConfigError, match="at least 3"):
        GoalSplit(2)


def test_episodes_are_the_same_in_another_process():
    """Catalog, prices, goal bounds and the first observation do not depend on the process."""
    code = ("from ragen_env_webshop.env import WebShopEnv; e = WebShopEnv(); import json; "
            "print(json.dumps([e.reset(s, mode=m) for s in (0, 9, 12345) for m in ('train', 'val')]))")
    here_env = __import__("ragen_env_webshop.env", fromlist=["WebShopEnv"]).WebShopEnv()
    here = [here_env.reset(s, mode=m) for s in (0, 9, 12345) for m in ("train", "val")]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert json.loads(out.stdout) == here


@needs_data
def test_loader_reads_the_real_documents_and_attribute_files():
    products = load_products(str(DOCS), str(ATTRS), seed=0)
    assert len(products) == 100
    by_asin = {p.asin: p for p in products}
    dress = by_asin["B08ZRR3DZT"]
    assert dress.title.startswith("SheIn Women's Sexy One Shoulder")
    assert dress.options["size"] == ("x-small", "small", "medium", "large", "x-large")
    assert "khaki" in dress.options["color"]
    assert dress.query == "women's dresses" and dress.category == "fashion"
    assert dress.instruction == "Find me women's dresses with polyester spandex for daily wear"
    assert dress.instruction_attributes == ("polyester spandex", "daily wear")
    assert 19.99 <= dress.price <= 27.99  # "$19.99 to $27.99": a seeded draw inside the range
    assert load_products(str(DOCS), str(ATTRS), seed=0)[products.index(dress)].price == dress.price
    table = by_asin["B06Y3VLDFB"]
    assert table.price == 877.8 and table.options == {} and "solid wood" in table.attributes
    assert table.features[1] == "Material:SOLID WOOD"
    goals = make_goals(products)
    assert {g.asin for g in goals} == {p.asin for p in products if p.instruction}
    assert len({g.asin for g in goals}) == 44


@needs_data
def test_loader_reads_items_shuffle_style_lists(tmp_path):
    """``items_shuffle`` files are a JSON list of raw products (the documents' ``product`` objects)."""
    raw = [json.loads(line)["product"] for line in DOCS.read_text().splitlines()[:10]]
    for r in raw:  # the raw file has none of the derived fields
        for key in ("Title", "Description", "BulletPoints", "Attributes", "options", "Price"):
            r.pop(key, None)
    raw[0]["pricing"] = []
    path = tmp_path / "items_shuffle_10.json"
    path.write_text(json.dumps(raw))
    products = load_products(str(path), str(ATTRS), limit=5)
    assert [p.asin for p in products] == [r["asin"] for r in raw[:5]]
    assert products[0].price == DEFAULT_PRICE


@needs_data
def test_real_catalog_engine_plays_through_the_oracle():
    engine = ShopEngine(CatalogConfig(product_path=str(DOCS), attribute_path=str(ATTRS)))
    for seed in range(10):
        goal = engine.goal_index(seed, "train")
        out = engine.start(goal)
        for action in engine.oracle_actions(goal, out.location):
            out = engine.step(goal, out.location, action)
        assert out.done and out.reward == 1.0, (seed, engine.goals[goal])


def test_loader_errors_name_the_files(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read the WebShop products of catalog.product_path .*missing.json"):
        load_products(str(tmp_path / "missing.json"), None)
    (tmp_path / "bad.json").write_text("{bad")  # which of the two files is malformed was not said
    (tmp_path / "good.json").write_text(json.dumps([{"asin": "B000000001", "name": "A lamp"}]))
    with pytest.raises(ConfigError, match=r"^cannot read the WebShop products of catalog.product_path .*bad.json \(Expecting"):
        load_products(str(tmp_path / "bad.json"), str(tmp_path / "good.json"))
    with pytest.raises(ConfigError, match=r"^cannot read the WebShop attributes of catalog.attribute_path .*bad.json \(Expecting"):
        load_products(str(tmp_path / "good.json"), str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match=r"^catalog.product_path .* is a folder: the WebShop catalog is read from files"):
        load_products(str(tmp_path), None)
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(ConfigError, match="no products"):
        load_products(str(tmp_path / "empty.json"), None)
    (tmp_path / "one.json").write_text(json.dumps([{"asin": "B000000001", "name": "A lamp"}]))
    with pytest.raises(ConfigError, match="attribute_path"):
        make_goals(load_products(str(tmp_path / "one.json"), None))


def test_a_broken_jsonl_line_is_named_by_its_line_in_the_file(tmp_path):
    """json's position is within the one line it parsed: a bad line 4 was reported as "line 1 column 16"."""
    rows = [json.dumps({"asin": f"B00000000{i}", "name": f"Lamp {i}"}) for i in range(3)]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join([*rows, '{"asin": "B0", oops}']) + "\n")
    with pytest.raises(ConfigError, match=r"^cannot read the WebShop products of catalog.product_path .*docs.jsonl "
                                          r"\(line 4 is not JSON: Expecting property name enclosed in double quotes \(column 16\)\)\n"):
        load_products(str(path), None)


@pytest.mark.parametrize("attrs", [[1, 2, 3], {"B000000001": [1, 2]}, {"B000000001": {"attributes": ["a"]}, "B000000002": "cheap"}])
def test_an_attribute_file_of_the_wrong_shape_is_refused_in_one_line(tmp_path, attrs):
    """A list, or an entry that is not an object, ended in AttributeError: 'list' object has no attribute 'get'."""
    products = tmp_path / "items.json"
    products.write_text(json.dumps([{"asin": "B000000001", "name": "A lamp"}, {"asin": "B000000002", "name": "A rug"}]))
    (tmp_path / "attrs.json").write_text(json.dumps(attrs))
    with pytest.raises(ConfigError, match=r"^catalog.attribute_path .*attrs.json.* (a JSON list|a JSON string), not an object") as err:
        load_products(str(products), str(tmp_path / "attrs.json"))
    assert len(err.value.message.splitlines()) == 1
    assert err.value.hints and "a JSON object mapping each ASIN to an object of its attributes" in err.value.hints[0]


@pytest.mark.parametrize(("entry", "said"), [
    ({"attributes": "solid wood"}, "'attributes' is a JSON string, not a list of strings"),  # its letters were the attributes
    ({"attributes": ["solid wood", 3]}, "'attributes' item 2 is a JSON number, not a string"),
    ({"attributes": [], "instruction": "a rug", "instruction_attributes": 5},  # a TypeError traceback
     "'instruction_attributes' is a JSON number, not a list of strings"),
    ({"attributes": [], "instruction": ["a rug"], "instruction_attributes": ["soft"]}, "'instruction' is a JSON list, not a string"),
    # one goal field without the other gave the product no goal, and nothing said so
    ({"attributes": ["soft"], "instruction": "a soft rug"},
     "'instruction' is set but 'instruction_attributes' is missing or empty: a goal needs both (or neither, for no goal)"),
    ({"attributes": ["soft"], "instruction": "a soft rug", "instruction_attributes": []},
     "'instruction' is set but 'instruction_attributes' is missing or empty: a goal needs both (or neither, for no goal)"),
    ({"attributes": ["soft"], "instruction": None, "instruction_attributes": ["soft"]},
     "'instruction_attributes' is set but 'instruction' is missing or empty: a goal needs both (or neither, for no goal)"),
    ({"attributes": ["soft"], "instruction": "  ", "instruction_attributes": ["soft"]},
     "'instruction_attributes' is set but 'instruction' is missing or empty: a goal needs both (or neither, for no goal)"),
])
def test_an_attribute_entry_with_a_mistyped_or_lone_goal_field_is_refused_in_one_line(tmp_path, entry, said):
    products = tmp_path / "items.json"
    products.write_text(json.dumps([{"asin": "B000000001", "name": "A lamp"}, {"asin": "B000000002", "name": "A rug"}]))
    attrs = tmp_path / "attrs.json"
    attrs.write_text(json.dumps({"B000000001": {"attributes": ["a"], "instruction": None}, "B000000002": entry}))
    with pytest.raises(ConfigError) as err:
        load_products(str(products), str(attrs))
    assert err.value.message == f"catalog.attribute_path {attrs}: the entry of 'B000000002': {said}"
    assert "a JSON object mapping each ASIN to an object of its attributes" in err.value.hints[0]
    attrs.write_text(json.dumps({"B000000001": {"attributes": ["a"], "instruction": None}, "B000000002": {"attributes": ["b"], "x": 1}}))
    assert [p.attributes for p in load_products(str(products), str(attrs))] == [("a",), ("b",)]  # null and other keys are fine
    attrs.write_text(json.dumps({"B000000001": {"attributes": ["a"], "instruction": "", "instruction_attributes": []},
                                 "B000000002": {"attributes": ["b"], "instruction": "a b rug", "instruction_attributes": ["b"]}}))
    assert [g.asin for g in make_goals(load_products(str(products), str(attrs)))] == ["B000000002"]  # both, or neither

def test_a_catalog_folder_is_refused_by_the_availability_check_and_a_bad_file_by_the_server(tmp_path, capsys):
    """A folder passed the check ("takes an existing file or folder") and failed at load; the shop
    server's start-up error reached the run as its traceback's last lines."""
    from ragen_env_webshop.plugin import check_available
    from ragen_env_webshop.server import main

    from ragen_core import registry

    with pytest.raises(ConfigError, match=r"^env_config.catalog.product_path: .* is a folder\n") as err:
        check_available(registry.make_config("env", "webshop", {"catalog": {"product_path": str(tmp_path)}}))
    assert err.value.hints == ["env_config.catalog.product_path takes a file"]
    (tmp_path / "bad.json").write_text("{bad")
    assert main(["--port", "1", "--settings", json.dumps({"catalog": {"product_path": str(tmp_path / "bad.json")}})]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("ragen-webshop-server: ConfigError: cannot read the WebShop products")


def test_an_attribute_file_without_a_product_file_is_refused(tmp_path, capsys):
    """The generated catalog never reads catalog.attribute_path: alone it is refused by the config,
    naming catalog.product_path, instead of being dropped without a word (also by ragen-webshop)."""
    from ragen_env_webshop.cli import main

    from ragen_core import registry
    from ragen_core.errors import PluginConfigError

    attrs = tmp_path / "items_ins_v2_1000.json"
    attrs.write_text("{}")
    with pytest.raises(PluginConfigError, match=r"catalog\.attribute_path is set without catalog\.product_path.*set catalog\.product_path"):
        registry.make_config("env", "webshop", {"catalog": {"attribute_path": str(attrs)}})
    assert registry.make_config("env", "webshop", {"catalog": {"attribute_path": str(attrs), "product_path": str(attrs)}})
    with pytest.raises(SystemExit):
        main(["serve", "--attribute-path", str(attrs)])
    assert "--attribute-path needs --product-path" in capsys.readouterr().err


def test_search_index_is_saved_once_and_loaded_by_later_builds(tmp_path, monkeypatch):
    import bm25s
    from ragen_env_webshop.search import SearchIndex

    products = generate_catalog(120, seed=5)
    first = SearchIndex(products, str(tmp_path))
    assert first.loaded_from is None and len(list(tmp_path.iterdir())) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("the index was rebuilt instead of loaded")

    monkeypatch.setattr(bm25s.BM25, "index", no_build)
    second = SearchIndex(products, str(tmp_path))
    assert second.loaded_from == next(tmp_path.iterdir())
    for query in ("green tea", "running shoes black", "gluten free granola", "zzz"):
        assert second.search(query) == first.search(query)
    assert first.search("green tea")  # the comparison above is not between empty results


def test_an_index_cache_dir_that_cannot_be_a_folder_warns_and_the_index_still_works(tmp_path, caplog):
    """index_cache_dir under a file failed every reset with a bare NotADirectoryError."""
    import logging

    from ragen_env_webshop.search import SearchIndex

    (tmp_path / "afile").write_text("x")
    products = generate_catalog(60, seed=5)
    with caplog.at_level(logging.WARNING, logger="ragen_env_webshop.search"):
        index = SearchIndex(products, str(tmp_path / "afile" / "idx"))
    assert index.loaded_from is None and index.search("green tea") == SearchIndex(products).search("green tea")
    assert f"catalog.index_cache_dir {tmp_path / 'afile' / 'idx'} cannot hold the search index (Not a directory)" in caplog.text
