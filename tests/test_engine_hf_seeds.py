"""HFEngine per-prompt seeds: a reply depends on its own prompt and seed, never on the batch."""

from __future__ import annotations

import pytest

from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def _prompts(tok):
    texts = ("<|im_start|>user\nState: #_P#<|im_end|>", "hello there", "x")
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def _alone(mt, prompt, seed, **cfg):
    """The reply of ``prompt`` under ``seed`` from a fresh engine, alone in its batch."""
    model, tok = mt
    return HFEngine(HFEngineConfig(**cfg), model=model, tokenizer=tok).generate([prompt], PARAMS, seeds=[seed])[0]


def _assert_same_replies(got, want):
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert [g.finish_reason for g in got] == [w.finish_reason for w in want]
    for g, w in zip(got, want):
        # Batch shapes change the float reduction order of the forward: ~1e-6 in the log-probs
        # (measured <= 1e-6 with scalar/AVX2/AVX-512 kernels), 1e-4 leaves ~100x margin.
        assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


@pytest.mark.parametrize("share", [True, False], ids=["shared-prefill", "no-shared-prefill"])
@pytest.mark.parametrize("reuse", [True, False], ids=["kv-reuse", "no-kv-reuse"])
@pytest.mark.parametrize("drop", [True, False], ids=["drop-finished", "keep-finished"])
def test_reply_is_the_same_alone_and_in_any_batch(mt, share, reuse, drop):
    model, tok = mt
    a, b, c = _prompts(tok)
    # A stop id that ends prompt b's reply under seed 22 after two tokens: in the batch that row
    # leaves early while the others keep decoding.
    stop = _alone(mt, b, 22).token_ids[1]
    cfg = dict(stop_token_ids=[stop], share_prompt_prefill=share, reuse_kv_cache=reuse, drop_finished=drop)
    prompts, seeds = [a, b, a, c, a], [1, 22, 3, 4, 1]  # a three times: twice the same seed
    want = [_alone(mt, p, s, **cfg) for p, s in zip(prompts, seeds)]
    lengths = {len(w.token_ids) for w in want}
    assert want[1].finish_reason == "stop" and min(lengths) < max(lengths) == PARAMS.max_new_tokens
    assert want[0].token_ids != want[2].token_ids  # same prompt, other seed: drawn apart

    eng = HFEngine(HFEngineConfig(**cfg), model=model, tokenizer=tok)
    _assert_same_replies(eng.generate(prompts, PARAMS, seeds=seeds), want)
    order = [3, 0, 4, 2, 1]  # other positions, same (prompt, seed) pairs
    _assert_same_replies(eng.generate([prompts[i] for i in order], PARAMS, seeds=[seeds[i] for i in order]), [want[i] for i in order])
    _assert_same_replies(eng.generate(prompts[2:4], PARAMS, seeds=seeds[2:4]), want[2:4])

    # Second turn: each prompt extends its first turn (reused from the kept caches when on).
    first = eng.generate(prompts, PARAMS, seeds=seeds)
    nxt = [p + g.token_ids + tok.encode(f"\nnext {i}", add_special_tokens=False) for i, (p, g) in enumerate(zip(prompts, first))]
    seeds2 = [s + 100 for s in seeds]
    second = eng.generate(nxt, PARAMS, seeds=seeds2)
    if reuse:
        assert eng.stats["reused_tokens"] > 0
    _assert_same_replies(second, [_alone(mt, p, s, **cfg) for p, s in zip(nxt, seeds2)])


def test_max_batch_size_chunks_keep_each_rows_seed(mt):
    model, tok = mt
    prompts = _prompts(tok) * 2
    seeds = [5, 6, 7, 8, 9, 10]
    whole = HFEngine(model=model, tokenizer=tok).generate(prompts, PARAMS, seeds=seeds)
    chunked = HFEngine(HFEngineConfig(max_batch_size=4), model=model, tokenizer=tok).generate(prompts, PARAMS, seeds=seeds)
    _assert_same_replies(chunked, whole)


def test_int_seed_is_a_base_for_per_prompt_seeds_and_unseeded_rows_differ(mt):
    from ragen_core.seeding import derive_seed

    model, tok = mt
    eng = HFEngine(model=model, tokenizer=tok)
    prompts = [_prompts(tok)[0]] * 4
    base = eng.generate(prompts, PARAMS, seeds=7)
    _assert_same_replies(base, eng.generate(prompts, PARAMS, seeds=[derive_seed(7, i) for i in range(4)]))
    unseeded = [tuple(g.token_ids) for g in eng.generate(prompts, PARAMS)]
    assert len(set(unseeded)) > 1  # every row gets its own fresh seed


def test_wrong_number_of_seeds_is_an_error(mt):
    model, tok = mt
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        HFEngine(model=model, tokenizer=tok).generate(_prompts(tok), PARAMS, seeds=[1, 2])
