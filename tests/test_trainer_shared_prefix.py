"""The shared-prefix forward gives the plain forward's log-probs, entropies, values and gradients."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ragen_core.models import load_model_and_tokenizer
from ragen_core.trainer import prefix
from ragen_core.trainer.modeling import build_critic, token_logprobs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PAD = 256

# Floats are compared against bounds in float32 epsilons; what must be exact (ids, masks, sampled
# episodes, counts) is compared exactly. Why an eps bound does not depend on the CPU: the shared
# and the plain path run the same float32 operations on the same values in a different order
# (as do 1 vs 2 threads, or micro-batches of 1 vs 2 rows); a CPU's SIMD width and thread count
# change *which* roundings happen, not their size relative to eps, which the computation's own
# conditioning sets. Measured with 1 and 2 threads and with ATen/MKL/oneDNN held to their
# scalar, AVX2 and AVX-512 code paths, shared vs plain and plain vs reordered plain alike: in the
# trainer, log-probs agree to <= 1.4 eps * (1 + |logp|) and a whole first-step gradient to
# <= 15 eps (relative L2); in the unit tests below (tiny, llama, gpt2, LoRA) outputs agree to
# <= 6 eps * (1 + |x|) and each gradient tensor to <= 19 eps of its largest entry. Run
# in float64 end to end, the paths agree to the same multiples of float64's eps: rounding, not an
# inexact path. A real error (a wrong position or mask, a lost or 0.1 %-scaled cache gradient)
# exceeds these bounds 50x or more.
EPS32 = 2.0**-23  # torch.finfo(torch.float32).eps
ROUNDING = 16.0  # trainer log-probs and metrics: ~12x the measured multiples of eps
GRAD_ROUNDING = 128.0  # gradients, whose entries are sums of partly cancelling parts: ~7x the measured 15-19 eps
OUT_TOL = {"atol": 1e-5, "rtol": 1e-5}  # unit-test log-probs, entropies, values: ~84 eps * (1 + |x|), ~14x the measured 6


@pytest.fixture(scope="module")
def model():
    m, _ = load_model_and_tokenizer("tiny")  # the default cache, shared with the trainer tests
    m.train()
    return m


@pytest.fixture
def switch(monkeypatch):
    """``switch(on)`` sets the module switch for the rest of the test."""

    def set_(on: bool) -> None:
        monkeypatch.setattr(prefix, "ENABLED", on)

    return set_


def _ids(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), generator=g).tolist()


def make_batch(rows: list[tuple[list[int], list[tuple[int, int]]]]):
    """Right-padded ``input_ids``, ``attention_mask`` and shifted ``response_mask`` from
    ``(ids, [(start, end) sampled spans])`` rows, like :mod:`ragen_core.trainer.batch`."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    am = torch.zeros((len(rows), width), dtype=torch.long)
    rm = torch.zeros((len(rows), width - 1))
    for i, (row, spans) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        am[i, : len(row)] = 1
        for a, b in spans:
            rm[i, a - 1 : b - 1] = 1.0
    return ids, am, rm


def mixed_rows():
    """Two shared prompts, replies of different lengths, a multi-turn row whose suffix holds an
    observation, a singleton prompt and padding."""
    p1, p2, p3 = _ids(40, 1), _ids(31, 2), _ids(25, 3)
    rows = []
    for k, n in enumerate((5, 9, 1)):
        rows.append((p1 + _ids(n, 10 + k), [(40, 40 + n)]))
    # multi-turn: reply 1 (6) + observation (7, not trained) + reply 2 (4)
    rows.append((p1 + _ids(6, 20) + _ids(7, 21) + _ids(4, 22), [(40, 46), (53, 57)]))
    rows.append((p2 + _ids(3, 30), [(31, 34)]))
    rows.append((p2 + _ids(12, 31), [(31, 43)]))
    rows.append((p3 + _ids(8, 40), [(25, 33)]))  # singleton
    return rows


def _run_policy(model, ids, am, rm, temperature=0.7):
    model.zero_grad(set_to_none=True)
    logp, ent = token_logprobs(model, ids, am, temperature=temperature, with_entropy=True, response_mask=rm)
    loss = ((logp - 0.3 * ent) * rm).sum() / rm.sum()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), grads


def _assert_grads_close(a, b):
    """Every parameter's gradient within GRAD_ROUNDING eps of that tensor's largest entry (relative
    to the largest: an entry is a sum of parts that partly cancel, so a small entry carries the
    rounding of its large parts)."""
    assert a.keys() == b.keys() and a
    for name in a:
        bound = GRAD_ROUNDING * EPS32 * float(a[name].abs().max())
        torch.testing.assert_close(b[name], a[name], atol=bound, rtol=0.0, msg=name)


def test_plan_clusters_rows_by_ids_before_first_trained_position():
    ids, am, rm = make_batch(mixed_rows())
    plan = prefix.plan_shared_prefix(ids, am, rm)
    assert plan is not None
    assert plan.cluster.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert plan.prefix_lens.tolist() == [39, 30, 24]  # prompt length - 1: logits from the last prompt token on
    assert plan.starts.tolist() == [39, 39, 39, 39, 30, 30, 24]
    assert plan.lengths.tolist() == am.sum(1).tolist()


def test_policy_logprobs_entropies_and_gradients_equal_the_plain_forward(model, switch):
    ids, am, rm = make_batch(mixed_rows())
    assert prefix.supports_shared_prefix(model)
    switch(False)
    lp0, e0, g0 = _run_policy(model, ids, am, rm)
    switch(True)
    lp1, e1, g1 = _run_policy(model, ids, am, rm)
    plan = prefix.plan_shared_prefix(ids, am, rm)
    assert plan is not None
    # every position from the prefix end to the last real token (observations included) is exact
    for i in range(len(ids)):
        s, n = int(plan.starts[i]), int(plan.lengths[i])
        torch.testing.assert_close(lp1[i, s : n - 1], lp0[i, s : n - 1], **OUT_TOL)
        torch.testing.assert_close(e1[i, s : n - 1], e0[i, s : n - 1], **OUT_TOL)
        assert not bool(lp1[i, :s].any()) and not bool(lp1[i, n - 1 :].any())
    _assert_grads_close(g0, g1)


def test_multi_turn_observation_positions_are_exact(model, switch):
    ids, am, rm = make_batch(mixed_rows())
    with torch.no_grad():
        switch(False)
        lp0, _ = token_logprobs(model, ids, am, response_mask=rm)
        switch(True)
        lp1, _ = token_logprobs(model, ids, am, response_mask=rm)
    obs = slice(46 - 1, 53 - 1)  # shifted positions scoring the observation tokens of row 3
    assert not bool(rm[3, obs].any())
    torch.testing.assert_close(lp1[3, obs], lp0[3, obs], **OUT_TOL)
    assert bool(lp1[3, obs].abs().gt(0).all())


def test_prefix_never_covers_a_trained_position(model, switch):
    # rows 0 and 1 share 30 ids, but row 0 is trained from token 20 on (its tokens 20..29 are a
    # sampled reply that happens to equal row 1's prompt): a prefix of 29 for both would swallow
    # row 0's first trained positions
    base = _ids(30, 5)
    rows = [(base + _ids(4, 6), [(20, 34)])] + [(base + _ids(3 + k, 7 + k), [(30, 33 + k)]) for k in range(5)]
    ids, am, rm = make_batch(rows)
    plan = prefix.plan_shared_prefix(ids, am, rm)
    assert plan is not None
    first = rm.argmax(dim=1)
    assert bool((plan.starts <= first).all())
    switch(False)
    lp0, e0, g0 = _run_policy(model, ids, am, rm)
    switch(True)
    lp1, e1, g1 = _run_policy(model, ids, am, rm)
    torch.testing.assert_close(lp1 * rm, lp0 * rm, **OUT_TOL)
    torch.testing.assert_close(e1 * rm, e0 * rm, **OUT_TOL)
    assert bool((lp1[rm > 0] != 0).all())
    _assert_grads_close(g0, g1)


def test_critic_values_and_gradients_equal_the_plain_forward(model, switch):
    ids, am, rm = make_batch(mixed_rows())
    critic = build_critic(model)
    torch.nn.init.normal_(critic.head.weight, std=0.05, generator=torch.Generator().manual_seed(0))
    target = torch.linspace(-1, 1, rm.shape[1]).expand_as(rm)

    def run():
        critic.zero_grad(set_to_none=True)
        v = critic(ids, am, response_mask=rm)
        ((((v - target) ** 2) * rm).sum() / rm.sum()).backward()
        return v.detach(), {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}

    switch(False)
    v0, g0 = run()
    switch(True)
    v1, g1 = run()
    torch.testing.assert_close(v1 * rm, v0 * rm, **OUT_TOL)
    row = 3  # multi-turn: values at observation positions (read by GAE at turn ends) are exact too
    torch.testing.assert_close(v1[row, 39:56], v0[row, 39:56], **OUT_TOL)
    _assert_grads_close(g0, g1)


@pytest.mark.parametrize("order,micro,live_factor", [
    (list(range(7)), 1, 2.0), ([0, 4, 6, 1, 5, 2, 3], 2, 2.0), ([6, 3, 4, 0, 1, 5, 2], 3, 2.0),
    ([0, 4, 1, 5, 2, 6, 3], 1, 1.2),  # interleaved groups, tight memory bound: some rows run on their own
])
def test_session_shares_prompts_across_micro_batches_with_exact_gradients(model, switch, monkeypatch, order, micro, live_factor):
    from ragen_core.trainer.prefix_session import PrefixSession

    monkeypatch.setattr(prefix, "SESSION_LIVE_FACTOR", live_factor)

    ids, am, rm = make_batch(mixed_rows())
    prefix_rows = []
    real = prefix.run_prefixes
    monkeypatch.setattr(prefix, "run_prefixes", lambda m, x, lens: prefix_rows.append(len(x)) or real(m, x, lens))

    def run():
        model.zero_grad(set_to_none=True)
        session = PrefixSession.create(model, ids, am, rm)
        lp_all, ent_all = torch.zeros_like(rm), torch.zeros_like(rm)
        for start in range(0, len(order), micro):
            idx = order[start : start + micro]
            lp, ent = token_logprobs(model, ids[idx], am[idx], temperature=0.7, with_entropy=True, response_mask=rm[idx], session=session)
            ((lp - 0.3 * ent) * rm[idx]).sum().div(rm.sum()).backward()  # one micro-batch's share of the loss
            lp_all[idx], ent_all[idx] = lp.detach(), ent.detach()
        if session is not None:
            session.finish()
        return lp_all, ent_all, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    switch(False)
    lp0, e0, g0 = run()
    assert prefix_rows == []
    switch(True)
    lp1, e1, g1 = run()
    if live_factor >= 2:
        assert sum(prefix_rows) == 3  # each of the three prompts ran once, whatever the micro-batching
    else:
        assert 0 < sum(prefix_rows) < 3  # the bound kept a prompt out of the session (its rows ran in full)
    torch.testing.assert_close(lp1 * rm, lp0 * rm, **OUT_TOL)
    torch.testing.assert_close(e1 * rm, e0 * rm, **OUT_TOL)
    _assert_grads_close(g0, g1)


def test_session_critic_values_and_gradients_with_single_row_micro_batches(model, switch):
    from ragen_core.trainer.prefix_session import PrefixSession

    ids, am, rm = make_batch(mixed_rows())
    critic = build_critic(model)
    torch.nn.init.normal_(critic.head.weight, std=0.05, generator=torch.Generator().manual_seed(1))

    def run():
        critic.zero_grad(set_to_none=True)
        session = PrefixSession.create(critic.lm, ids, am, rm)
        values = torch.zeros_like(rm)
        for i in range(len(ids)):
            v = critic(ids[i : i + 1], am[i : i + 1], response_mask=rm[i : i + 1], session=session)
            ((v - 0.5) ** 2 * rm[i : i + 1]).sum().div(rm.sum()).backward()
            values[i] = v.detach()[0]
        if session is not None:
            session.finish()
        return values, {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}

    switch(False)
    v0, g0 = run()
    switch(True)
    v1, g1 = run()
    torch.testing.assert_close(v1 * rm, v0 * rm, **OUT_TOL)
    _assert_grads_close(g0, g1)


def test_lora_policy_gradients_and_reference_logprobs_match(switch):
    peft = pytest.importorskip("peft")
    from ragen_core.trainer.prefix_session import PrefixSession
    from ragen_core.trainer.setup import peft_quiet

    base, _ = load_model_and_tokenizer("tiny")
    with peft_quiet():
        lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:  # non-zero adapters, so they change the outputs
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.05)
    lora.train()
    ids, am, rm = make_batch(mixed_rows())

    def run():
        lora.zero_grad(set_to_none=True)
        session = PrefixSession.create(lora, ids, am, rm)
        for i in range(len(ids)):
            lp, _ = token_logprobs(lora, ids[i : i + 1], am[i : i + 1], response_mask=rm[i : i + 1], session=session)
            (lp * rm[i : i + 1]).sum().div(rm.sum()).backward()
        if session is not None:
            session.finish()
        with torch.no_grad(), lora.disable_adapter():
            ref, _ = token_logprobs(lora, ids, am, response_mask=rm)
        return ref, {n: p.grad.clone() for n, p in lora.named_parameters() if p.grad is not None}

    switch(False)
    ref0, g0 = run()
    switch(True)
    ref1, g1 = run()
    assert any("lora_A" in n for n in g0)
    _assert_grads_close(g0, g1)
    torch.testing.assert_close(ref1 * rm, ref0 * rm, **OUT_TOL)


def test_turn_level_rows_share_their_common_first_prompt(model, switch, monkeypatch):
    # one row per turn-2 context: first prompt + a different turn-1 reply + observation, trained only
    # on the turn-2 reply; no two rows have the same ids before their first trained token
    from ragen_core.trainer.prefix_session import PrefixSession

    p1 = _ids(40, 1)
    rows = [(p1 + _ids(3 + i, 50 + i) + _ids(5, 60) + _ids(4 + i, 70 + i), [(48 + i, 52 + 2 * i)]) for i in range(4)]
    rows.append((_ids(30, 2) + _ids(6, 80), [(30, 36)]))  # a different prompt
    ids, am, rm = make_batch(rows)
    found = prefix.row_keys(ids, am, rm)
    assert found is not None
    assert found.starts.tolist() == [40, 40, 40, 40, 29]  # the common first prompt; the lone row: its own r
    assert bool((found.starts <= rm.argmax(dim=1)).all())
    prefix_rows = []
    real = prefix.run_prefixes
    monkeypatch.setattr(prefix, "run_prefixes", lambda m, x, lens: prefix_rows.append(lens.tolist()) or real(m, x, lens))

    def run(micro):
        model.zero_grad(set_to_none=True)
        session = PrefixSession.create(model, ids, am, rm) if micro < len(ids) else None
        lp_all = torch.zeros_like(rm)
        for start in range(0, len(ids), micro):
            sl = slice(start, start + micro)
            lp, _ = token_logprobs(model, ids[sl], am[sl], response_mask=rm[sl], session=session)
            (lp * rm[sl]).sum().div(rm.sum()).backward()
            lp_all[sl] = lp.detach()
        if session is not None:
            session.finish()
        return lp_all, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    switch(False)
    lp0, g0 = run(len(ids))
    switch(True)
    for micro in (len(ids), 2):
        prefix_rows.clear()
        lp1, g1 = run(micro)
        assert sorted(x for lens in prefix_rows for x in lens) == [29, 40]
        torch.testing.assert_close(lp1 * rm, lp0 * rm, **OUT_TOL)
        _assert_grads_close(g0, g1)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_other_architectures_match_and_dropout_keeps_the_plain_path(switch, arch):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":  # learned absolute positions, dropout 0.1 by default
        m = GPT2LMHeadModel(GPT2Config(vocab_size=260, n_positions=64, n_embd=64, n_layer=2, n_head=2, attn_implementation="sdpa"))
    else:
        m = LlamaForCausalLM(LlamaConfig(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, attn_implementation="sdpa"))
    m.train()
    assert prefix.supports_shared_prefix(m) == (arch != "gpt2")  # training with dropout: one mask per row copy
    m.eval()
    assert prefix.supports_shared_prefix(m)
    ids, am, rm = make_batch(mixed_rows())
    switch(False)
    lp0, e0, g0 = _run_policy(m, ids, am, rm)
    switch(True)
    lp1, e1, g1 = _run_policy(m, ids, am, rm)
    torch.testing.assert_close(lp1 * rm, lp0 * rm, **OUT_TOL)
    torch.testing.assert_close(e1 * rm, e0 * rm, **OUT_TOL)
    _assert_grads_close(g0, g1)


def test_falls_back_to_the_plain_forward_when_nothing_is_shared(model):
    ids, am, rm = make_batch([(_ids(20, 1) + [1, 2], [(20, 22)]), (_ids(20, 2) + [3], [(20, 21)])])
    assert prefix.plan_shared_prefix(ids, am, rm) is None  # all singletons
    ids, am, rm = make_batch(mixed_rows())
    assert prefix.plan_shared_prefix(ids, am, None) is None  # no response mask: plain
    left = torch.roll(am, 1, dims=1)
    assert prefix.plan_shared_prefix(ids, left, rm) is None  # not right-padded
    trained_first = rm.clone()
    trained_first[0, 0] = 1.0
    assert prefix.plan_shared_prefix(ids, am, trained_first) is None  # an empty prefix
    on_pad = rm.clone()
    on_pad[2, -1] = 1.0
    assert prefix.plan_shared_prefix(ids, am, on_pad) is None  # a trained position on padding
    # the plain path (no response mask) still returns every position
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, am)
    assert bool((lp[0, :38] != 0).all())


def test_switch_off_forces_the_plain_path(switch):
    ids, am, rm = make_batch(mixed_rows())
    switch(False)
    assert prefix.plan_shared_prefix(ids, am, rm) is None


def test_unsupported_models_use_the_plain_path(model, monkeypatch):
    assert prefix.supports_shared_prefix(model)
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    assert not prefix.supports_shared_prefix(model)


def _train_two_steps(tmp_path, monkeypatch, algo: str, micro: int = 1) -> dict:
    """Two trainer steps on the toy env with the shared-prefix switch as set; what the comparison reads.

    ``rollouts``: per step, the saved episodes without the engine's float log-probs; ``metrics``:
    per step; ``logp``: ``(ids, response_mask, log-probs)`` of every policy (and reference)
    forward before the policy's first optimiser step, its rows unpadded and concatenated; ``grads``: the
    flat pre-clip gradient of the policy's and the critic's first optimiser step.
    """
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer import modeling
    from ragen_core.trainer.config import RunConfig
    from ragen_core.trainer.trainer import Trainer

    run_dir = tmp_path / f"{algo}-shared{prefix.ENABLED}-micro{micro}"
    rows, grads, policy_params = [], {}, set()
    real_logprobs, real_clip = modeling.token_logprobs, torch.nn.utils.clip_grad_norm_

    def logprobs(model, input_ids, attention_mask, **kw):
        out = real_logprobs(model, input_ids, attention_mask, **kw)
        if "policy" not in grads:
            for i, n in enumerate(attention_mask.sum(dim=1).tolist()):  # per row, unpadded: micro-batches pad differently
                rows.append((input_ids[i, :n].clone(), kw["response_mask"][i, : n - 1].clone(), out[0][i, : n - 1].detach().clone()))
        return out

    def clip(params, max_norm, *args, **kwargs):
        params = list(params)
        who = "policy" if id(params[0]) in policy_params else "critic"
        grads.setdefault(who, torch.cat([p.grad.detach().flatten() for p in params]))
        return real_clip(params, max_norm, *args, **kwargs)

    env = register_toy_env()
    # ppo: two mini-batches (a separate no-grad old-log-prob pass) and a critic
    mini = 2 if algo == "ppo" else 4
    cfg = load_config(RunConfig, [], [
        f"env={env}", f"algo={algo}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
        "rollout.env_groups=2", "rollout.group_size=2", "rollout.max_model_len=512", "sampling.train.max_new_tokens=10",
        f"optim.mini_batch_size={mini}", f"optim.micro_batch_size={micro}", "optim.lr=1e-3", "test_freq=0", "save_freq=0",
        "steps=2", "warm_start.enabled=false", "progress=false", "save_rollouts=true", f"run_dir={run_dir}",
    ])
    with monkeypatch.context() as mp:
        mp.setattr(modeling, "token_logprobs", logprobs)
        mp.setattr(torch.nn.utils, "clip_grad_norm_", clip)
        trainer = Trainer(cfg)
        trainer.setup()
        policy_params.update(id(p) for p in trainer.model.parameters())
        metrics = [trainer.train_step(step) for step in (1, 2)]
    rollouts = []
    for step in (1, 2):
        episodes = [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        for episode in episodes:
            for turn in episode["turns"]:
                turn.pop("response_logprobs", None)
        rollouts.append(episodes)
    assert rows and set(grads) == ({"policy", "critic"} if algo == "ppo" else {"policy"})
    return {"rollouts": rollouts, "metrics": metrics, "logp": [torch.cat(x) for x in zip(*rows)], "grads": grads}


def _whitening_gain(metrics: dict) -> float:
    """How much batch whitening of the advantages (PPO) magnifies rounding in its input.

    ``A = (R - mean R) / std R``: rounding errors of size ``eps * |R|`` in the raw advantages
    ``R`` come out divided by ``std R``, i.e. ``1 + |mean R| / std R`` times ``eps`` relative to
    the unit-scale ``A``. Here every episode earns the same reward, so after the critic's first
    step ``std R`` is the spread of the critic's own values (~4e-4 against ``|mean R|`` ~0.07:
    a gain of ~150), and every actor quantity computed from ``A`` inherits it.
    """
    if "critic/raw_adv_std" not in metrics:
        return 1.0  # no whitening of float inputs (GRPO normalises exact scores)
    std = math.sqrt(metrics["critic/raw_adv_std"] ** 2 + 1e-8)  # the PPO plugin whitens with var + 1e-8
    return 1.0 + abs(metrics["critic/raw_adv_mean"]) / std


def _assert_same_training(a: dict, b: dict) -> dict[str, float]:
    """Assert that run ``b`` trained like run ``a``; returns each float check's worst |diff| / bound."""
    worst: dict[str, float] = {}

    def within(name: str, diff, bound) -> None:
        ratio = float(torch.as_tensor(diff / bound).max())
        worst[name] = max(worst.get(name, 0.0), ratio)
        assert ratio <= 1.0, f"{name}: |diff| is {ratio:.3g} times the rounding bound"

    # before any optimiser step: the same episodes (token ids, masks) and rounding-level floats
    ids_a, rm_a, lp_a = a["logp"]
    ids_b, rm_b, lp_b = b["logp"]
    assert torch.equal(ids_a, ids_b) and torch.equal(rm_a, rm_b)
    trained = rm_a > 0
    within("log-probs before the first update", (lp_b - lp_a)[trained].abs(), ROUNDING * EPS32 * (1 + lp_a[trained].abs()))
    assert a["grads"].keys() == b["grads"].keys()
    for who, ga in a["grads"].items():
        within(f"{who} gradient of the first step", (b["grads"][who] - ga).norm(), GRAD_ROUNDING * EPS32 * ga.norm())

    # exact: the sampled episodes (ids, text, actions, rewards) and counts. Step 2 samples from
    # weights that differ by rounding (~1e-7 relative): a token flips only if its uniform draw falls
    # within that distance of a CDF boundary, ~1e-6 per token.
    assert a["rollouts"] == b["rollouts"]
    for ma, mb in zip(a["metrics"], b["metrics"], strict=True):
        for k in ("train/reward", "train/batch_size", "train/num_mini_batches", "response_length/mean"):
            assert mb[k] == ma[k], k
    if "critic/advantages/mean" in a["metrics"][0]:
        # step 1: the zero-initialised value head gives values of exactly 0 on either path, so the
        # advantages come from identical inputs and are identical (the premise of the gain below)
        for k in ("critic/advantages/mean", "critic/advantages/max", "critic/advantages/min"):
            assert b["metrics"][0][k] == a["metrics"][0][k], k

    # after optimiser steps: the same rounding, magnified for what the whitened advantages feed
    keys = ["actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"]
    keys += [k for k in ("critic/vf_loss", "critic/grad_norm", "critic/values/mean", "critic/advantages/mean") if k in a["metrics"][0]]
    for step, (ma, mb) in enumerate(zip(a["metrics"], b["metrics"]), start=1):
        gain = 1.0 if step == 1 else _whitening_gain(ma)  # step 1: identical advantages (above)
        for k in keys:
            g = gain if k.startswith(("actor/", "critic/advantages")) else 1.0
            # max(1, |x|): the terms of a loss that cancels to near 0 (pg_loss, advantage mean) are O(1)
            within(f"{k} (step {step})", abs(mb[k] - ma[k]), ROUNDING * EPS32 * g * max(1.0, abs(ma[k])))
    return worst


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_training_step_gives_the_same_losses_with_and_without_shared_prefix(tmp_path, switch, monkeypatch, algo):
    # micro-batches of one row: every prompt is shared across micro-batches (PrefixSession)
    calls = []
    real = prefix.run_suffixes
    monkeypatch.setattr(prefix, "run_suffixes", lambda *a, **k: calls.append(k.get("hidden", False)) or real(*a, **k))
    switch(False)
    plain = _train_two_steps(tmp_path, monkeypatch, algo)
    assert calls == []
    switch(True)
    shared = _train_two_steps(tmp_path, monkeypatch, algo)
    assert calls and (algo != "ppo" or True in calls)  # the policy (and the critic) took the shared path
    _assert_same_training(plain, shared)
