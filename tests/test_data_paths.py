"""Data settings of the agentic envs that name a missing local file are refused before a run starts
(one line naming the setting), while hub ids and the built-in defaults pass."""

from __future__ import annotations

import pytest

from ragen_core import registry
from ragen_core.cli.main import main
from ragen_core.datafiles import names_local_path
from ragen_core.errors import ConfigError
from ragen_core.testing.run_helpers import one_line_error


@pytest.fixture(autouse=True)
def _offline_already(monkeypatch):
    """Offline mode set as a user would: the availability checks then never probe the hub (nor
    switch this test process to offline mode; the test of that switch undoes this)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


CASES = [  # env, the setting, a hub id the setting also takes (None: a path only)
    ("deepcoder", "dataset", "agentica-org/DeepCoder-Preview-Dataset"),
    ("deepcoder", "val_dataset", None),
    ("metamathqa", "dataset_path", "openai/gsm8k"),
    ("searchqa", "dataset", None),
    ("searchqa", "retriever.corpus", None),
    ("webshop", "catalog.product_path", None),
]


def _data_rows(env: str, field: str) -> str:
    """Three distinct rows an env's data setting reads (local data is read by the availability check)."""
    import json

    rows = {"deepcoder": lambda i: {"problem": f"Print {i}.", "tests": json.dumps([{"input": "1\n", "output": f"{i}\n"}])},
            "metamathqa": lambda i: {"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"},
            "searchqa": lambda i: {"question": f"Who made thing {i}?", "answer": f"maker {i}"}}.get(env)
    if rows is None or "." in field:  # a corpus or a catalogue: only its existence is checked
        return "{}\n"
    return "".join(json.dumps(rows(i)) + "\n" for i in range(3))


def _nested(field: str, value: str) -> dict:
    head, _, rest = field.partition(".")
    return {head: _nested(rest, value) if rest else value}


@pytest.mark.parametrize(("env", "field", "hub"), CASES)
def test_a_missing_local_data_file_is_refused_by_the_env_availability_check(tmp_path, env, field, hub):
    if env not in registry.names("env"):
        pytest.skip(f"env {env!r} is not installed")
    spec = registry.get_spec("env", env)
    missing = str(tmp_path / "nope" / "data.jsonl")
    with pytest.raises(ConfigError, match=rf"^env_config\.{field}: {missing} does not exist \({tmp_path} exists\)"):
        spec.check_available(registry.make_config("env", env, _nested(field, missing)))
    (tmp_path / "data.jsonl").write_text(_data_rows(env, field))
    spec.check_available(registry.make_config("env", env, _nested(field, str(tmp_path / "data.jsonl"))))
    spec.check_available(registry.make_config("env", env, {}))  # the built-in data
    if hub is not None:
        spec.check_available(registry.make_config("env", env, _nested(field, hub)))  # not looked for on disk


def test_what_can_only_be_a_local_path():
    assert names_local_path("./train.jsonl") and names_local_path("~/d") and names_local_path("/data/x")
    assert names_local_path("train.parquet") and names_local_path("a/b/c")
    assert not names_local_path("openai/gsm8k") and not names_local_path("meta-math/MetaMathQA")


def test_a_plain_folder_name_that_exists_here_is_a_local_path(tmp_path, monkeypatch):
    """dataset_path=mmdir (a folder here) was taken for a hub id: "the Hugging Face hub cannot be
    reached, so env_config.dataset_path=mmdir is read from the local datasets cache only"."""
    monkeypatch.chdir(tmp_path)
    assert not names_local_path("mmdir")
    (tmp_path / "mmdir").mkdir()
    assert names_local_path("mmdir")


def test_ragen_run_refuses_a_missing_dataset_before_the_run_folder(tmp_path, capsys):
    if "deepcoder" not in registry.names("env"):
        pytest.skip("ragen-env-deepcoder is not installed")
    run_dir = tmp_path / "run"
    assert main(["run", "--env", "deepcoder", "--steps", "1", "--run-dir", str(run_dir), f"env_config.dataset={tmp_path / 'x.jsonl'}"]) == 2
    assert one_line_error(capsys.readouterr().err).startswith(f"ConfigError: env_config.dataset: {tmp_path / 'x.jsonl'} does not exist")
    assert not run_dir.exists()


@pytest.mark.parametrize(("env", "settings"), [
    ("searchqa", {}),
    ("webshop", {"shop": "server"}),
])
def test_a_server_url_that_does_not_answer_is_refused_at_once(env, settings):
    import socket

    if env not in registry.names("env"):
        pytest.skip(f"env {env!r} is not installed")
    with socket.socket() as s:  # a port nothing listens on: bound, then closed
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    spec = registry.get_spec("env", env)
    with pytest.raises(ConfigError, match=rf"^env_config\.server\.url: nothing answers at {url} \(TCP connect failed"):
        spec.check_available(registry.make_config("env", env, {**settings, "server": {"url": url}}))
    with socket.socket() as listening:  # a server that accepts connections passes
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        spec.check_available(registry.make_config("env", env, {**settings, "server": {"url": f"http://127.0.0.1:{listening.getsockname()[1]}"}}))


def test_ragen_eval_runs_the_same_start_checks_as_ragen_run(tmp_path, capsys):
    if "metamathqa" not in registry.names("env"):
        pytest.skip("ragen-env-metamathqa is not installed")
    missing = tmp_path / "x.jsonl"
    assert main(["eval", "--env", "metamathqa", "--groups", "1", f"env_config.dataset_path={missing}"]) == 2
    printed = capsys.readouterr()
    assert one_line_error(printed.err).startswith(f"ConfigError: env_config.dataset_path: {missing} does not exist")
    assert "model:" not in printed.out + printed.err  # refused before a model loaded


def test_webshop_refuses_a_server_url_its_in_process_shop_would_ignore():
    if "webshop" not in registry.names("env"):
        pytest.skip("ragen-env-webshop is not installed")
    with pytest.raises(ConfigError, match=r"server\.url 'http://127\.0\.0\.1:1' is set but shop is 'inprocess', which never uses it"):
        registry.make_config("env", "webshop", {"server": {"url": "http://127.0.0.1:1"}})


def test_a_training_file_named_as_a_test_split_is_warned_about(tmp_path):
    from types import SimpleNamespace

    from ragen_core.datafiles import named_test_split_warnings

    for name in ("gsm8k_test_100.jsonl", "test.parquet", "livecodebench-Test2408.json"):
        (tmp_path / name).write_text("{}\n")
        found = named_test_split_warnings(SimpleNamespace(dataset=str(tmp_path / name)), ("dataset",))
        assert len(found) == 1 and found[0].startswith(f"env_config.dataset={tmp_path / name}: {name} is read as training data, but its name says")
        assert "env_config.val_dataset" in found[0]
    for name in ("gsm8k_train.jsonl", "contest_latest.jsonl", "testing.json"):
        (tmp_path / name).write_text("{}\n")
        assert named_test_split_warnings(SimpleNamespace(dataset=str(tmp_path / name)), ("dataset",)) == []
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a_train.jsonl").write_text("{}\n")
    (folder / "b_test.jsonl").write_text("{}\n")
    assert ": b_test.jsonl is read as training data" in named_test_split_warnings(SimpleNamespace(dataset=str(folder)), ("dataset",))[0]
    # a folder read by `datasets` takes its training split from the file names: no warning
    assert named_test_split_warnings(SimpleNamespace(dataset=str(folder)), ("dataset",), folders=False) == []
    assert named_test_split_warnings(SimpleNamespace(dataset="openai/gsm8k", other=None), ("dataset", "other")) == []  # hub ids pass


@pytest.mark.parametrize(("env", "field", "val_field"), [("metamathqa", "dataset_path", "val_dataset_path"),
                                                         ("deepcoder", "dataset", "val_dataset"), ("searchqa", "dataset", "val_dataset")])
def test_the_agentic_envs_warn_about_a_local_test_file(tmp_path, env, field, val_field):
    if env not in registry.names("env"):
        pytest.skip(f"env {env!r} is not installed")
    spec = registry.get_spec("env", env)
    settings = {"mock_mode": True} if env == "searchqa" else {}
    (tmp_path / "gsm8k_test_5.jsonl").write_text(_data_rows(env, field))
    (tmp_path / "gsm8k_train_5.jsonl").write_text(_data_rows(env, field))
    found = spec.check_available(registry.make_config("env", env, {**settings, field: str(tmp_path / "gsm8k_test_5.jsonl")}))
    assert len(found) == 1 and f"env_config.{val_field}" in found[0]
    assert spec.check_available(registry.make_config("env", env, {**settings, field: str(tmp_path / "gsm8k_train_5.jsonl")})) == []


def test_a_hub_dataset_while_the_hub_cannot_be_reached_turns_datasets_offline_with_a_warning(monkeypatch):
    import os
    import socket
    import sys
    from types import SimpleNamespace

    from ragen_core.datafiles import check_data_paths

    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for module, name in (("datasets.config", "HF_DATASETS_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"),
                         ("huggingface_hub.constants", "HF_HUB_OFFLINE")):
        if module in sys.modules:  # restored after the test: the switch also tells loaded modules
            monkeypatch.setattr(sys.modules[module], name, getattr(sys.modules[module], name))
    with socket.socket() as s:  # a "hub" where nothing listens: bound, then closed
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    config = SimpleNamespace(dataset="owner/name", val_dataset=None)
    (warning,) = check_data_paths(config, hub_or_path=("dataset", "val_dataset"))
    assert warning.startswith("the Hugging Face hub cannot be reached (TCP connect failed") and "env_config.dataset=owner/name is read" in warning
    assert os.environ["HF_DATASETS_OFFLINE"] == os.environ["HF_HUB_OFFLINE"] == "1"
    if "datasets.config" in sys.modules:
        assert sys.modules["datasets.config"].HF_DATASETS_OFFLINE is True
    assert check_data_paths(config, hub_or_path=("dataset",)) == []  # offline now: nothing more to say
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with socket.socket() as hub:  # a hub that answers: nothing changes
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        assert check_data_paths(config, hub_or_path=("dataset",)) == []
    assert "HF_DATASETS_OFFLINE" not in os.environ
