"""HFEngine prefills each distinct prompt of a batch once: outputs equal the per-row path."""

from __future__ import annotations

import pytest

from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GREEDY = SamplingParams(do_sample=False, max_new_tokens=6)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def _abc(tok):
    a, b, c = (tok.encode(t, add_special_tokens=False) for t in ("<|im_start|>user\nState: #_P#<|im_end|>", "hello there", "x"))
    return a, b, c


def _engine(mt, **cfg):
    model, tok = mt
    return HFEngine(HFEngineConfig(**cfg), model=model, tokenizer=tok)


def test_mixed_duplicates_greedy_equal_rows_one_by_one(mt):
    a, b, c = _abc(mt[1])
    prompts = [a, b, a, c, b, a]
    eng = _engine(mt, reuse_kv_cache=False)
    batched = eng.generate(prompts, GREEDY)
    for p, g in zip(prompts, batched):
        single = _engine(mt, reuse_kv_cache=False).generate([p], GREEDY)[0]
        assert g.token_ids == single.token_ids
        # batch shapes reorder the forward's float32 sums: measured <= 1e-6 (~1 eps * (1 + |lp|)), 10x margin
        assert g.logprobs == pytest.approx(single.logprobs, abs=1e-5)
    # Three distinct prompts were run through the model; the duplicates were copied.
    st = eng.stats
    assert st["prefill_tokens"] == len(a) + len(b) + len(c)
    assert st["shared_tokens"] == 2 * len(a) + len(b)
    assert st["prompt_tokens"] == st["prefill_tokens"] + st["shared_tokens"] + st["reused_tokens"]


def test_sharing_off_prefills_every_row_with_identical_samples(mt):
    a, b, _ = _abc(mt[1])
    prompts = [a, a, b, a]
    on, off = _engine(mt), _engine(mt, share_prompt_prefill=False)
    got_on, got_off = on.generate(prompts, SAMPLED, seeds=4), off.generate(prompts, SAMPLED, seeds=4)
    assert [g.token_ids for g in got_on] == [g.token_ids for g in got_off]
    for x, y in zip(got_on, got_off):
        # shared vs per-row prefill reorder the float32 sums: measured <= 1e-6, 10x margin
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
    assert off.stats["prefill_tokens"] == 3 * len(a) + len(b) and off.stats["shared_tokens"] == 0
    assert on.stats["prefill_tokens"] == len(a) + len(b) and on.stats["shared_tokens"] == 2 * len(a)


def test_duplicate_rows_sample_independently_and_seeded(mt):
    a, _, _ = _abc(mt[1])
    prompts = [a] * 4
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    first = [g.token_ids for g in _engine(mt).generate(prompts, params, seeds=9)]
    again = [g.token_ids for g in _engine(mt).generate(prompts, params, seeds=9)]
    assert first == again
    assert len({tuple(t) for t in first}) > 1  # shared prefill, separate draws


def test_multi_turn_reuse_still_hits_after_expansion(mt):
    tok = mt[1]
    a, b, _ = _abc(tok)
    prompts = [a, a, b]
    outs, engines = [], []
    for reuse in (True, False):
        eng = _engine(mt, reuse_kv_cache=reuse)
        first = eng.generate(prompts, SAMPLED, seeds=1)
        nxt = [p + g.token_ids + tok.encode(f"\nturn 2 row {i}", add_special_tokens=False) for i, (p, g) in enumerate(zip(prompts, first))]
        second = eng.generate(nxt, GREEDY)
        outs.append(([g.token_ids for g in first], [g.token_ids for g in second], [g.logprobs for g in second]))
        engines.append(eng)
    assert outs[0][:2] == outs[1][:2]
    for x, y in zip(outs[0][2], outs[1][2]):
        # reused vs recomputed prefixes reorder the float32 sums: measured <= 5e-7, 20x margin
        assert x == pytest.approx(y, abs=1e-5)
    on = engines[0].stats
    # Every second-turn row extends its own first-turn context (prompt + reply minus last id).
    assert on["reused_tokens"] == sum(len(p) + len(t) - 1 for p, t in zip(prompts, outs[0][0]))
    assert on["prompt_tokens"] == on["prefill_tokens"] + on["shared_tokens"] + on["reused_tokens"]


def test_identical_second_turn_prompts_share_one_reused_row(mt):
    # Greedy replies to a duplicated prompt are identical, so the next turn's prompts are too:
    # one kept cache serves both, and the second copy is counted as shared, not reused.
    _, tok = mt
    a, _, _ = _abc(tok)
    eng = _engine(mt)
    first = eng.generate([a, a], GREEDY)
    nxt = [a + g.token_ids + [ord("!")] for g in first]
    assert nxt[0] == nxt[1]
    second = eng.generate(nxt, GREEDY)
    ref = _engine(mt, reuse_kv_cache=False).generate([nxt[0]], GREEDY)[0]
    assert [g.token_ids for g in second] == [ref.token_ids, ref.token_ids]
    ctx = len(a) + len(first[0].token_ids) - 1
    assert eng.stats["reused_tokens"] == ctx
    assert eng.stats["shared_tokens"] == len(a) + len(nxt[0])
    assert eng.stats["prefill_tokens"] == len(a) + len(nxt[0]) - ctx
