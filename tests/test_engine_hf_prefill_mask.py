"""The additive 4-D prefill mask the HF engine builds on CPU gives the same replies as the 2-D one."""

from __future__ import annotations

import pytest
import torch

from ragen_core.engines import hf
from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine, additive_prefill_mask
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_mask_allows_valid_keys_up_to_each_query():
    # Columns: [pad, cached, cached | pad, new, new]; the 3 queries sit on columns 3, 4, 5.
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]])
    out = additive_prefill_mask(mask, 3, torch.float32)
    assert out.shape == (1, 1, 3, 6)
    allowed = (out[0, 0] == 0).int().tolist()
    assert allowed == [[0, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 0], [0, 1, 1, 0, 1, 1]]
    assert float(out.min()) == torch.finfo(torch.float32).min  # finite: no NaN for pad queries


def test_mask_dtype_follows_the_model():
    out = additive_prefill_mask(torch.ones(2, 4, dtype=torch.long), 2, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and float(out.min()) == float(torch.finfo(torch.bfloat16).min)


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def _run(mt):
    """Two turns over prompts of different lengths (padding in the prompt and the kept cache)."""
    model, tok = mt
    eng = HFEngine(HFEngineConfig(), model=model, tokenizer=tok)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("a", "hello there, corridor", "<|im_start|>user\n#_P_G#<|im_end|>")]
    params = SamplingParams(do_sample=False, max_new_tokens=7)
    first = eng.generate(prompts, params)
    nxt = [p + g.token_ids + tok.encode("!" * (i + 1), add_special_tokens=False) for i, (p, g) in enumerate(zip(prompts, first))]
    second = eng.generate(nxt, params)
    assert eng.stats["reused_tokens"] > 0
    return [(g.token_ids, g.logprobs) for g in first + second]


def test_engine_replies_equal_with_and_without_the_prebuilt_mask(mt, monkeypatch):
    assert hf._float_mask_pays(mt[0], torch.device("cpu"))  # the tiny model uses it on CPU
    with_mask = _run(mt)
    monkeypatch.setattr(hf, "_float_mask_pays", lambda model, device: False)
    plain = _run(mt)
    for (ids_a, lp_a), (ids_b, lp_b) in zip(with_mask, plain):
        assert ids_a == ids_b
        # the mask's form changes no sum's order: measured identical; 1e-5 (~10 eps * (1 + |lp|)) is slack
        assert lp_a == pytest.approx(lp_b, abs=1e-5)


def test_bfloat16_model_with_padding_gives_finite_equal_replies(mt, monkeypatch):
    import copy

    model, tok = mt
    half = (copy.deepcopy(model).to(torch.bfloat16), tok)
    with_mask = _run(half)
    monkeypatch.setattr(hf, "_float_mask_pays", lambda model, device: False)
    plain = _run(half)
    for (ids_a, lp_a), (ids_b, lp_b) in zip(with_mask, plain):
        assert all(lp == lp for lp in lp_a)  # no NaN from fully masked pad queries
        assert ids_a == ids_b
        # measured identical (no sum is reordered); 1e-3 is below bfloat16's rounding (eps 3.9e-3
        # relative), so a path that computed anything differently in bfloat16 would still show
        assert lp_a == pytest.approx(lp_b, abs=1e-3)
