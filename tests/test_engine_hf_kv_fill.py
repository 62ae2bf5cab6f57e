"""Kept KV caches are laid straight into the growable buffers: same cache, same replies."""

from __future__ import annotations

import pytest
import torch

from ragen_core.engines import _kv
from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_fill_rows_right_aligns_rows_over_zeros_and_then_grows_in_place():
    from transformers.cache_utils import DynamicLayer

    gen = torch.Generator().manual_seed(0)
    rows = [(torch.randn(2, n, 3, generator=gen), torch.randn(2, n, 3, generator=gen)) for n in (4, 2)] + [None]
    layer = _kv.GrowableLayer(reserve=1)
    layer.fill_rows(rows, width=5, room=2)
    assert layer.keys.shape == (3, 2, 5, 3) and layer.get_seq_length() == 5
    assert torch.equal(layer.keys[0, :, 1:], rows[0][0]) and torch.equal(layer.values[1, :, 3:], rows[1][1])
    assert not layer.keys[0, :, :1].any() and not layer.values[1, :, :3].any() and not layer.keys[2].any()
    buf = layer._kbuf
    # Reference: a plain layer fed the same padded block, then both take the prefill's 2 new positions.
    plain = DynamicLayer()
    plain.update(layer.keys.clone(), layer.values.clone())
    k, v = torch.randn(3, 2, 2, 3, generator=gen), torch.randn(3, 2, 2, 3, generator=gen)
    assert all(torch.equal(a, b) for a, b in zip(plain.update(k, v), layer.update(k, v)))
    assert layer._kbuf is buf  # room was reserved: no regrowth copy


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def _three_turns(mt):
    model, tok = mt
    eng = HFEngine(HFEngineConfig(), model=model, tokenizer=tok)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("a", "two words", "<|im_start|>user\n#P_G#<|im_end|>", "two words")]
    params = SamplingParams(temperature=1.0, max_new_tokens=5)
    outs = []
    for turn in range(3):
        gens = eng.generate(prompts, params, seeds=turn)
        outs.append([(g.token_ids, g.logprobs) for g in gens])
        # Rows grow by different amounts, so kept caches have different lengths (padding).
        prompts = [p + g.token_ids + tok.encode("." * (i + turn + 1), add_special_tokens=False) for i, (p, g) in enumerate(zip(prompts, gens))]
    assert eng.stats["reused_tokens"] > 0
    return outs


def test_direct_fill_and_staged_fill_give_the_same_replies(mt, monkeypatch):
    direct = _three_turns(mt)
    monkeypatch.setattr(_kv, "use_growable_layers", lambda cache, reserve: None)  # plain layers: staged copy
    staged = _three_turns(mt)
    for turn_a, turn_b in zip(direct, staged):
        for (ids_a, lp_a), (ids_b, lp_b) in zip(turn_a, turn_b):
            assert ids_a == ids_b
            # the same cache contents written two ways: measured identical; 1e-5 (~10 eps * (1 + |lp|)) is slack
            assert lp_a == pytest.approx(lp_b, abs=1e-5)
