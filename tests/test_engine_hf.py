"""HFEngine: batched sampling from ids, exact outputs, seeded determinism, faithful log-probs."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from ragen_core import registry
from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine, sample_next
from ragen_core.errors import RagenError
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture()
def engine(mt):
    model, tok = mt
    return HFEngine(HFEngineConfig(), model=model, tokenizer=tok)


def _prompts(tok):
    texts = ["a", "hello there", "<|im_start|>user\nTurn 1:\nState:\n#_P#<|im_end|>\n<|im_start|>assistant\n<think>"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


GREEDY = SamplingParams(do_sample=False, max_new_tokens=8)


def test_greedy_batched_equals_single_and_hf_generate(engine, mt):
    model, tok = mt
    prompts = _prompts(tok)
    batched = engine.generate(prompts, GREEDY)
    for p, g in zip(prompts, batched):
        single = engine.generate([p], GREEDY)[0]
        assert single.token_ids == g.token_ids
        ref = model.generate(torch.tensor([p]), max_new_tokens=8, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        assert ref[0, len(p) :].tolist() == g.token_ids
        assert g.finish_reason == "length" and len(g.token_ids) == 8


def test_same_seed_same_samples_other_seed_differs(engine, mt):
    prompts = _prompts(mt[1]) * 2
    params = SamplingParams(max_new_tokens=16)
    a = engine.generate(prompts, params, seeds=7)
    b = engine.generate(prompts, params, seeds=7)
    c = engine.generate(prompts, params, seeds=8)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_global_rng_untouched(engine, mt):
    state = torch.random.get_rng_state()
    engine.generate(_prompts(mt[1]), SamplingParams(max_new_tokens=4), seeds=1)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_stops_at_stop_id_and_keeps_it(mt):
    model, tok = mt
    prompts = _prompts(tok)
    free = HFEngine(model=model, tokenizer=tok).generate(prompts, GREEDY)
    # Make the third greedy token of prompt 0 a stop id: that row ends there, EOS included.
    stop_id = free[0].token_ids[2]
    eng = HFEngine(HFEngineConfig(stop_token_ids=[stop_id]), model=model, tokenizer=tok)
    out = eng.generate(prompts, GREEDY)
    first = free[0].token_ids.index(stop_id)
    assert out[0].token_ids == free[0].token_ids[: first + 1]
    assert out[0].finish_reason == "stop"
    assert len(out[0].logprobs) == len(out[0].token_ids)
    for o, f in zip(out[1:], free[1:]):
        if stop_id in f.token_ids:
            assert o.token_ids == f.token_ids[: f.token_ids.index(stop_id) + 1]
        else:
            assert o.token_ids == f.token_ids and o.finish_reason == "length"


def test_drop_finished_does_not_change_greedy_output(mt):
    model, tok = mt
    prompts = _prompts(tok)
    stop_id = HFEngine(model=model, tokenizer=tok).generate(prompts, GREEDY)[1].token_ids[0]
    outs = []
    for drop in (True, False):
        eng = HFEngine(HFEngineConfig(stop_token_ids=[stop_id], drop_finished=drop), model=model, tokenizer=tok)
        outs.append([g.token_ids for g in eng.generate(prompts, GREEDY)])
    assert outs[0] == outs[1]
    assert outs[0][1] == [stop_id]


def test_logprobs_are_under_the_sampling_distribution(engine, mt):
    model, tok = mt
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=10)
    prompt = _prompts(tok)[2]
    g = engine.generate([prompt], params, seeds=3)[0]
    ids = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    gen = torch.Generator().manual_seed(0)
    for t, (row, tid) in enumerate(zip(logits, g.token_ids)):
        # Recompute the truncated, tempered distribution independently of sample_next.
        x = row / 0.7
        keep = torch.topk(x, 20).indices
        probs = torch.softmax(x[keep], dim=-1)
        order = torch.argsort(probs, descending=True)
        cum = torch.cumsum(probs[order], 0) - probs[order]
        nucleus = keep[order[cum < 0.9]]
        assert tid in nucleus.tolist()
        expected = torch.log_softmax(x[nucleus], dim=-1)[nucleus.tolist().index(tid)]
        # ~100 eps * (1 + |lp|): the engine's KV-cache steps and this full forward sum in different orders (measured <= 5e-7)
        assert g.logprobs[t] == pytest.approx(float(expected), abs=1e-4)
    del gen


def test_greedy_logprobs_are_model_log_softmax(engine, mt):
    model, tok = mt
    prompt = _prompts(tok)[1]
    g = engine.generate([prompt], SamplingParams(do_sample=False, max_new_tokens=5))[0]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + g.token_ids])).logits[0, len(prompt) - 1 : -1]
    lp = torch.log_softmax(logits.float(), -1)
    for t, tid in enumerate(g.token_ids):
        # ~100 eps * (1 + |lp|): KV-cache steps vs one full forward reorder the sums (measured <= 5e-7)
        assert g.logprobs[t] == pytest.approx(float(lp[t, tid]), abs=1e-4)


def test_top_k_one_equals_greedy(engine, mt):
    prompts = _prompts(mt[1])
    a = engine.generate(prompts, SamplingParams(top_k=1, max_new_tokens=8), seeds=5)
    b = engine.generate(prompts, SamplingParams(do_sample=False, max_new_tokens=8))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    # log-softmax over the one kept logit: 0 up to float32 rounding (measured exactly 0)
    assert all(lp == pytest.approx(0.0, abs=1e-6) for g in a for lp in g.logprobs)


def test_temperature_zero_is_greedy(engine, mt):
    prompts = _prompts(mt[1])
    a = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=6), seeds=1)
    b = engine.generate(prompts, SamplingParams(do_sample=False, max_new_tokens=6))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_sample_next_masks_unused_vocab():
    logits = torch.tensor([[0.0, 0.0, 50.0, 50.0]])
    for params in (SamplingParams(do_sample=False), SamplingParams()):
        ids, _ = sample_next(logits, params, torch.rand(1, generator=torch.Generator().manual_seed(0)), vocab_limit=2)
        assert ids.item() in (0, 1)


def test_top_p_keeps_smallest_nucleus():
    # probs ~ [0.5, 0.3, 0.2]: top_p 0.6 keeps {0, 1}; renormalised logp of id 0 = log(0.5/0.8).
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        ids, lp = sample_next(logits, SamplingParams(top_p=0.6), torch.rand(1, generator=gen))
        seen.add(ids.item())
        if ids.item() == 0:
            # float32 renormalisation over two tokens: a few eps of |log 0.625| (1e-5 is ~100x that)
            assert lp.item() == pytest.approx(float(torch.log(torch.tensor(0.5 / 0.8))), abs=1e-5)
    assert seen == {0, 1}


def test_max_batch_size_chunks_keep_greedy_results(mt):
    model, tok = mt
    prompts = _prompts(tok)
    whole = HFEngine(model=model, tokenizer=tok).generate(prompts, GREEDY)
    chunked = HFEngine(HFEngineConfig(max_batch_size=2), model=model, tokenizer=tok).generate(prompts, GREEDY)
    assert [g.token_ids for g in whole] == [g.token_ids for g in chunked]


def _perturbed(model):
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    return other


def test_sync_weights_from_another_state_dict_copies_into_the_attached_module(mt):
    model, tok = mt
    prompts = _prompts(tok)
    mine = copy.deepcopy(model)  # the engine writes into its module: keep the shared fixture intact
    eng = HFEngine(model=mine, tokenizer=tok)
    before = [g.token_ids for g in eng.generate(prompts, GREEDY)]
    other = _perturbed(model)
    expected = [g.token_ids for g in HFEngine(model=other, tokenizer=tok).generate(prompts, GREEDY)]
    assert expected != before
    eng.sync_weights(other.state_dict(), version=3)
    assert eng.model is mine
    after = eng.generate(prompts, GREEDY)
    assert [g.token_ids for g in after] == expected
    assert [g.policy_version for g in after] == [3, 3, 3]
    for (name, a), b in zip(mine.state_dict().items(), other.state_dict().values()):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr(), name  # copied, not shared
    eng.sync_weights(model.state_dict(), version=4)
    assert [g.token_ids for g in eng.generate(prompts, GREEDY)] == before


def test_sync_weights_with_the_modules_own_tensors_copies_nothing(mt, monkeypatch):
    model, tok = mt
    mine = copy.deepcopy(model)
    eng = HFEngine(model=mine, tokenizer=tok)
    eng.generate(_prompts(tok), GREEDY)
    assert eng._store

    def refuse(*a, **k):
        raise AssertionError("own tensors must not be copied")

    monkeypatch.setattr(mine, "load_state_dict", refuse)
    eng.sync_weights(mine.state_dict(), version=2)
    assert eng.policy_version == 2 and eng._store == []  # version recorded, kept caches dropped


def test_sync_weights_after_an_in_place_update_samples_the_new_weights(mt):
    model, tok = mt
    prompts = _prompts(tok)
    mine = copy.deepcopy(model)
    eng = HFEngine(model=mine, tokenizer=tok)
    eng.generate(prompts, GREEDY)  # leaves kept caches computed with the old weights
    with torch.no_grad():
        for p, q in zip(mine.parameters(), _perturbed(model).parameters()):
            p.copy_(q)  # what an optimiser step does: same tensors, new values
    eng.sync_weights(mine.state_dict(), version=1)
    expected = HFEngine(model=_perturbed(model), tokenizer=tok).generate(prompts, GREEDY)
    assert [g.token_ids for g in eng.generate(prompts, GREEDY)] == [g.token_ids for g in expected]


def test_policy_version_on_generations(engine, mt):
    model, tok = mt
    assert {g.policy_version for g in engine.generate(_prompts(tok), GREEDY)} == {0}
    engine.sync_weights(model.state_dict(), version=7)
    assert {g.policy_version for g in engine.generate(_prompts(tok), SamplingParams(max_new_tokens=3), seeds=1)} == {7}
    engine.attach(model, tok)
    assert engine.policy_version == 0


def test_sync_weights_rejects_a_state_dict_of_another_shape(mt):
    model, tok = mt
    eng = HFEngine(model=copy.deepcopy(model), tokenizer=tok)
    weights = dict(model.state_dict())
    weights.pop(next(iter(weights)))
    with pytest.raises(RagenError, match="does not fit the attached model"):
        eng.sync_weights(weights, version=1)


def test_training_mode_restored(engine, mt):
    model, tok = mt
    model.train()
    try:
        engine.generate(_prompts(tok), SamplingParams(max_new_tokens=2), seeds=0)
        assert model.training
    finally:
        model.eval()


def test_empty_inputs(engine):
    assert engine.generate([], GREEDY) == []
    with pytest.raises(RagenError):
        engine.generate([[]], GREEDY)


def test_registry_builds_engine_with_attached_model(mt):
    model, tok = mt
    eng = registry.make("engine", "hf", {"max_batch_size": 4}, model=model, tokenizer=tok)
    assert isinstance(eng, HFEngine)
    assert eng.config.max_batch_size == 4
    assert eng.stop_ids == {tok.convert_tokens_to_ids("<|im_end|>")}


def test_engine_loads_model_lazily(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))
    eng = HFEngine(HFEngineConfig(model="tiny"))
    assert eng.model is None
    out = eng.generate([[104, 105]], SamplingParams(max_new_tokens=3), seeds=0)
    assert eng.model is not None and len(out[0].token_ids) <= 3


def test_plugin_module_imports_no_torch():
    code = ("import sys, ragen_core.engines.plugin as p; assert p.HF_SPEC.name == 'hf'; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _two_turns(engine, tok, params, seeds=None):
    prompts = _prompts(tok)
    first = engine.generate(prompts, params, seeds=seeds)
    nxt = [p + g.token_ids + tok.encode(f"\nnext {i}", add_special_tokens=False) for i, (p, g) in enumerate(zip(prompts, first))]
    nxt[0] = tok.encode("an unrelated fresh prompt", add_special_tokens=False)
    return first, nxt, engine.generate(nxt, params, seeds=seeds)


def test_kv_reuse_gives_same_greedy_replies_and_skips_prefill(mt):
    model, tok = mt
    outs, stats = [], []
    for reuse in (True, False):
        eng = HFEngine(HFEngineConfig(reuse_kv_cache=reuse), model=model, tokenizer=tok)
        first, _nxt, second = _two_turns(eng, tok, GREEDY)
        outs.append(([g.token_ids for g in first], [g.token_ids for g in second]))
        stats.append(dict(eng.stats))
    assert outs[0] == outs[1]
    on, off = stats
    assert off["reused_tokens"] == 0 and off["prefill_tokens"] == off["prompt_tokens"]
    # Rows 1 and 2 reuse their prompt + reply minus the last sampled token; row 0 is fresh.
    first_lens = [len(p) + 8 - 1 for p in _prompts(tok)]
    assert on["reused_tokens"] == first_lens[1] + first_lens[2]
    assert on["prefill_tokens"] + on["reused_tokens"] == on["prompt_tokens"]


def test_kv_reuse_sampling_is_still_seed_deterministic(mt):
    model, tok = mt
    params = SamplingParams(max_new_tokens=6)
    runs = []
    for reuse in (True, True, False):
        eng = HFEngine(HFEngineConfig(reuse_kv_cache=reuse), model=model, tokenizer=tok)
        runs.append([g.token_ids for g in _two_turns(eng, tok, params, seeds=11)[2]])
    assert runs[0] == runs[1]
    assert runs[0] == runs[2]  # same distribution, same generator stream


def test_sync_weights_drops_kept_cache(engine, mt):
    model, tok = mt
    engine.generate(_prompts(tok), GREEDY)
    assert engine._store
    engine.sync_weights(model.state_dict(), version=1)
    assert engine._store == []


def test_the_end_of_a_rollout_drops_kept_cache(engine, mt):
    model, tok = mt
    engine.generate(_prompts(tok), GREEDY)
    assert engine._store
    engine.rollout_done()  # the runner's last turn: no prompt extends these replies, the update needs the memory
    assert engine._store == []
    engine.generate(_prompts(tok), GREEDY)  # the next rollout keeps its own turns again
    assert len(engine._store) == len(_prompts(tok))


def test_kv_reuse_respects_token_cap(mt):
    model, tok = mt
    prompts = _prompts(tok)
    cap = len(prompts[0]) + 8  # room for the first row's context only
    eng = HFEngine(HFEngineConfig(reuse_kv_max_tokens=cap), model=model, tokenizer=tok)
    eng.generate(prompts, GREEDY)
    assert [len(e.tokens) for e in eng._store] == [len(prompts[0]) + 7]


def test_growable_kv_layer_matches_concatenating_layer():
    from transformers.cache_utils import DynamicLayer

    from ragen_core.engines._kv import GrowableLayer

    gen = torch.Generator().manual_seed(0)
    plain, grow = DynamicLayer(), GrowableLayer(reserve=2)
    for n in (5, 1, 1, 1, 3):  # crosses the reserve twice
        k, v = torch.randn(3, 2, n, 4, generator=gen), torch.randn(3, 2, n, 4, generator=gen)
        pk, pv = plain.update(k, v)
        gk, gv = grow.update(k, v)
        assert torch.equal(pk, gk) and torch.equal(pv, gv)
    keep = torch.tensor([0, 2])
    plain.batch_select_indices(keep)
    grow.batch_select_indices(keep)
    k, v = torch.randn(2, 2, 1, 4, generator=gen), torch.randn(2, 2, 1, 4, generator=gen)
    assert all(torch.equal(a, b) for a, b in zip(plain.update(k, v), grow.update(k, v)))
    assert grow.get_seq_length() == plain.get_seq_length() == 12


def test_torch_threads_setting_is_restored(mt):
    model, tok = mt
    before = torch.get_num_threads()
    eng = HFEngine(HFEngineConfig(torch_threads=1), model=model, tokenizer=tok)
    eng.generate(_prompts(tok), SamplingParams(max_new_tokens=2), seeds=0)
    assert torch.get_num_threads() == before


def test_stats_split_model_forwards_from_the_engines_own_time(engine, mt):
    assert engine.stats["forward_s"] == engine.stats["total_s"] == 0.0
    engine.generate(_prompts(mt[1]), SamplingParams(max_new_tokens=4), seeds=0)
    st = engine.stats
    assert 0.0 < st["forward_s"] < st["total_s"]  # the rest is the engine's own time
    assert st["calls"] == 1 and st["generated_tokens"] == 12


def test_a_lora_wrapped_policy_is_called_with_its_base_models_cache_argument(mt):
    """A PEFT wrapper's ``forward`` takes ``**kwargs``; the engine must still pass the base model's
    cache keyword (``cache`` in transformers 5), not the deprecated ``past_key_values`` (dropped in
    5.40). Fresh LoRA adapters are zero, so greedy replies equal the plain model's."""
    import warnings

    peft = pytest.importorskip("peft")
    from ragen_core.models import cache_argument
    from ragen_core.trainer.setup import peft_quiet

    model, tok = mt
    base = copy.deepcopy(model)
    with peft_quiet():
        lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    assert cache_argument(lora) == cache_argument(model)
    prompts = _prompts(tok)
    plain = HFEngine(HFEngineConfig(), model=model, tokenizer=tok).generate(prompts, GREEDY)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*deprecated")
        wrapped = HFEngine(HFEngineConfig(), model=lora, tokenizer=tok).generate(prompts, GREEDY)
    assert [g.token_ids for g in wrapped] == [g.token_ids for g in plain]
