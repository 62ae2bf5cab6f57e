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
