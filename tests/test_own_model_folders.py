"""A user's own Hugging Face model folder: what it lacks is said in one line, before training.

The folders are built here (a 2-layer Qwen2 with the byte-level tokenizer): nothing downloads.
"""

from __future__ import annotations

import json

import pytest

from ragen_core.errors import RagenError
from ragen_core.models import load_model_and_tokenizer


@pytest.fixture(scope="module")
def own_model(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ragen_core.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=2048, tie_word_embeddings=True,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    folder = tmp_path_factory.mktemp("own") / "mymodel"
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _copy(src, dst, drop=()):
    import shutil

    shutil.copytree(src, dst)
    for name in drop:
        (dst / name).unlink()
    return dst


def test_the_complete_folder_loads(own_model):
    model, tokenizer = load_model_and_tokenizer(str(own_model))
    assert tokenizer.chat_template and len(tokenizer) == model.config.vocab_size


def test_a_folder_without_tokenizer_files_is_refused_in_one_line(own_model, tmp_path):
    folder = _copy(own_model, tmp_path / "notok", drop=("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"))
    with pytest.raises(RagenError) as err:  # transformers would build an empty one-token tokenizer from config.json alone
        load_model_and_tokenizer(str(folder))
    assert err.value.message == f"could not load model {str(folder)!r}: the folder has no tokenizer files (tokenizer.json, tokenizer_config.json)"
    assert "tokenizer.save_pretrained" in err.value.hints[0]


def test_a_tokenizer_without_chat_template_is_refused_in_one_line(own_model, tmp_path):
    folder = _copy(own_model, tmp_path / "nochat", drop=("chat_template.jinja",))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    with pytest.raises(RagenError) as err:
        load_model_and_tokenizer(str(folder))
    assert err.value.message.startswith(f"could not load model {str(folder)!r}: its tokenizer has no chat template")
    assert "tokenizer.chat_template" in err.value.hints[0]


@pytest.mark.parametrize("command", ["eval", "run"])
def test_the_cli_exits_2_with_one_line_for_a_folder_without_tokenizer(own_model, tmp_path, capsys, command):
    from ragen_core.cli.main import main

    folder = _copy(own_model, tmp_path / "my model", drop=("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"))
    extra = ["--run-dir", str(tmp_path / "run"), "--steps", "1"] if command == "run" else []
    assert main([command, "--env", "bandit", "--model", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[0] == f"RagenError: could not load model {str(folder)!r}: the folder has no tokenizer files " \
                                          "(tokenizer.json, tokenizer_config.json)"
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_the_cli_exits_2_with_one_line_for_a_tokenizer_without_chat_template(own_model, tmp_path, capsys):
    from ragen_core.cli.main import main

    folder = _copy(own_model, tmp_path / "nochat", drop=("chat_template.jinja",))
    assert main(["eval", "--env", "bandit", "--model", str(folder), "--groups", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[0].startswith(f"RagenError: could not load model {str(folder)!r}: its tokenizer has no chat template")


def test_resuming_a_lora_run_whose_base_folder_is_gone_says_so_in_one_line(own_model, tmp_path, capsys):
    """It said "the folder does not exist" and to pass another model folder, which --resume refuses."""
    pytest.importorskip("peft")
    import shutil

    from ragen_core.cli.main import main

    folder = _copy(own_model, tmp_path / "base")
    run = tmp_path / "run"
    tiny_run = ["warm_start.enabled=false", "test_freq=0", "rollout.env_groups=2", "rollout.group_size=2", "optim.mini_batch_size=4",
                "sampling.train.max_new_tokens=8", "optim.peft.rank=4", "progress=false"]
    assert main(["run", "--env", "bandit", "--model", str(folder), "--steps", "1", "--run-dir", str(run), *tiny_run]) == 0
    capsys.readouterr()
    shutil.rmtree(folder)
    assert main(["run", "--resume", str(run), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-2] == f"CheckpointError: cannot resume this LoRA run: its base model folder {folder} is gone " \
                                           "(the adapters in step_1/adapter apply to it)"
    assert err.strip().splitlines()[-1].startswith(f"hint: put the model folder back at {folder}")
