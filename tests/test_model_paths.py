"""A model path that names nothing is a missing folder, said in one line (not a Hub repo-id error)."""

from __future__ import annotations

import pytest

from ragen_core.errors import RagenError
from ragen_core.models import check_model_folder


@pytest.mark.parametrize("name", ["./missing", "/nonexistent/model", "~/nonexistent-ragen-model", "a/b/c"])
def test_a_path_that_does_not_exist_is_named_as_a_missing_folder(name):
    with pytest.raises(RagenError) as err:
        check_model_folder(name)
    assert err.value.message.startswith(f"could not load model {name!r}: the folder does not exist")  # (; <nearest existing parent> exists)


def test_a_missing_checkpoint_of_an_existing_run_lists_the_saved_ones(tmp_path, monkeypatch):
    for step in (2, 10):
        (tmp_path / "runs" / "r1" / "checkpoints" / f"step_{step}").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RagenError) as err:
        check_model_folder("runs/r1/checkpoints/step_30")
    assert err.value.message.endswith("the folder does not exist; runs/r1/checkpoints exists")
    assert err.value.hints == ["checkpoints in runs/r1/checkpoints: step_2, step_10"]
    with pytest.raises(RagenError, match="the folder does not exist; runs exists"):
        check_model_folder("runs/other")  # one slash, but 'runs' is a folder here: a path, not a Hub id


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-0.5B-Instruct", "gpt2"])
def test_hub_ids_are_left_to_the_hub(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder named like the owner here
    check_model_folder(name)  # no error: whether the Hub has it is the loader's question


def test_ragen_eval_on_a_missing_folder_exits_2_naming_it(tmp_path, capsys):
    from ragen_core.cli.main import main

    missing = tmp_path / "runs" / "x" / "checkpoints" / "step_3"
    assert main(["eval", "--env", "bandit", "--model", str(missing)]) == 2
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert first == f"RagenError: could not load model {str(missing)!r}: the folder does not exist; {tmp_path} exists"


@pytest.mark.parametrize(("name", "meant"), [("WARM", "'warm'"), ("Tiny", "'tiny'"), ("WARM:bandit", "'warm:bandit'")])
def test_our_names_in_another_case_are_refused_naming_the_spelling(name, meant):
    from ragen_core.models import check_hub_model

    with pytest.raises(RagenError) as err:
        check_hub_model(name)
    assert err.value.message == f"could not load model {name!r}: no such model; did you mean {meant}? (names are case-sensitive)"


def test_a_hub_id_that_is_not_cached_is_one_line_at_once_when_offline(monkeypatch, tmp_path):
    import time

    from huggingface_hub import constants

    from ragen_core.models import check_hub_model

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    started = time.monotonic()
    with pytest.raises(RagenError) as err:
        check_hub_model("owner/not-cached", cache_dir=tmp_path)
    assert time.monotonic() - started < 10  # what from_pretrained took ~50 s to say offline (a loose bound, not a benchmark)
    assert err.value.message == ("could not load model 'owner/not-cached': it is no local folder, not in the Hugging Face cache, "
                                 "and the hub cannot be reached (HF_HUB_OFFLINE is set)")


def test_a_hub_id_in_the_cache_or_a_reachable_hub_passes(monkeypatch, tmp_path):
    import socket

    from huggingface_hub import constants

    from ragen_core.models import check_hub_model

    snapshot = tmp_path / "models--owner--name" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--owner--name" / "refs").mkdir()
    (tmp_path / "models--owner--name" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    check_hub_model("owner/name", cache_dir=tmp_path)  # cached: no network needed
    with pytest.raises(RagenError, match="hub cannot be reached"):
        check_hub_model("owner/other", cache_dir=tmp_path)
    check_hub_model("tiny")
    check_hub_model(str(tmp_path))  # a local folder is check_model_folder's business
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as hub:  # a "hub" that accepts connections
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        check_hub_model("owner/other", cache_dir=tmp_path)
    with pytest.raises(RagenError, match=r"hub cannot be reached \(TCP connect failed") as err:
        check_hub_model("owner/other", cache_dir=tmp_path)  # the same port, closed
    assert err.value.hints[0].startswith("pass a local model folder")


def test_ragen_eval_refuses_an_empty_model_and_names_a_shipped_policy_spelt_in_another_case(capsys):
    from ragen_core.cli.main import main

    assert main(["eval", "--env", "bandit", "--model", ""]) == 2
    assert capsys.readouterr().err.splitlines()[0] == "ConfigError: --model is empty"
    assert main(["eval", "--env", "bandit", "--model", "warm:Bandit"]) == 2
    assert "hint: did you mean warm:bandit? (names are case-sensitive)" in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(("name", "evaluate"), [("warm", "warm"), ("warm:bandit", "warm:bandit"), ("tiny-warm", "warm:tiny-warm")])
def test_a_shipped_policy_name_as_a_runs_model_says_what_it_is(name, evaluate):
    from ragen_core.models import check_hub_model

    with pytest.raises(RagenError) as err:
        check_hub_model(name)
    assert err.value.message.startswith(f"could not load model {name!r}: it names a shipped warm policy")
    assert err.value.hints[0].startswith("train with model=tiny") and err.value.hints[0].endswith(f"ragen eval --model {evaluate}")
