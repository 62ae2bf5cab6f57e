"""Per-env reply budgets (spec 17 L33, ``rollout.enforce_env_max_tokens``): an env's ``max_tokens``
was only the prompt's "max response length" hint; with the setting on it caps that env's replies."""

from __future__ import annotations

import itertools

import pytest

from ragen_core import registry
from ragen_core.config import load_config
from ragen_core.engines.config import HFEngineConfig
from ragen_core.engines.hf import HFEngine
from ragen_core.engines.scripted import ScriptedEngine
from ragen_core.errors import ConfigError
from ragen_core.interfaces.engine import SamplingParams
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.interfaces.env_pool import EnvRef
from ragen_core.models import load_model_and_tokenizer
from ragen_core.rollout.env_pool import LocalEnvPool
from ragen_core.rollout.layout import episode_layout
from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
from ragen_core.seeding import derive_seed
from ragen_core.specs import EnvSpec
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.setup import rollout_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WALK = "reply-budget-walk"


class WalkEnv(Env):
    """Never ends by itself: ``Up`` and ``Down`` move a counter; the runner's max_turns ends it."""

    config_class = EnvConfig

    @property
    def action_names(self) -> list[str]:
        return ["Up", "Down"]

    def instruction(self) -> str:
        return "Walk."

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        self.pos = 0
        return self.render()

    def render(self) -> str:
        return f"pos={self.pos}"

    def step(self, action: str) -> StepResult:
        self.pos += 1 if action == "Up" else -1
        return StepResult(self.render(), 0.0, False, {"success": False, "action_is_valid": True})


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    registry.register(EnvSpec(name=WALK, config_model=EnvConfig, factory=f"{__name__}:WalkEnv"))
    return load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("models"))


def _run(tok, engine, sampling, *, max_tokens, pool_budgets=None, **cfg):
    """One rollout of WalkEnv (2 x 2 episodes, 2 turns); ``pool_budgets``: the ``max_tokens`` of
    each new env in turn (several envs in one rollout), else all get ``max_tokens``."""
    env = EnvRef(name=WALK, config={"max_tokens": max_tokens, "max_turns": 2})
    config = RolloutConfig(env_groups=2, group_size=2, **cfg)
    pool = None
    if pool_budgets is not None:
        budgets = itertools.cycle(pool_budgets)
        pool = LocalEnvPool(env, env_factory=lambda: WalkEnv(max_tokens=next(budgets), max_turns=2))
    runner = RolloutRunner(env, engine, tok, config, pool=pool)
    try:
        return runner.run(mode="val", sampling=sampling)
    finally:
        runner.close()


def _tokens(trajs):
    return [[(turn.prompt_ids, turn.response_ids, turn.response_logprobs, turn.finish_reason) for turn in t.turns] for t in trajs]


def test_hf_engine_stops_each_row_at_its_own_budget_as_if_generated_alone(mt):
    model, tok = mt
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("a", "hello there", "State: #_P#")]
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    seeds, caps = [5, 6, 7], [3, 10, 6]
    for drop in (True, False):  # a row at its budget leaves the batch, or stays in it unsampled
        eng = HFEngine(HFEngineConfig(drop_finished=drop), model=model, tokenizer=tok)
        full = eng.generate(prompts, params, seeds=seeds)
        capped = eng.generate_capped(prompts, params, seeds, caps)
        for p, s, c, f, g in zip(prompts, seeds, caps, full, capped):
            alone = HFEngine(HFEngineConfig(), model=model, tokenizer=tok).generate(
                [p], params.model_copy(update={"max_new_tokens": c}), seeds=[s])[0]
            assert g.token_ids == alone.token_ids == f.token_ids[:c]  # the seed stream's prefix: same draws
            assert g.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
            assert g.finish_reason == alone.finish_reason
        assert len(capped[0].token_ids) == 3 and capped[0].finish_reason == "length"  # the tiny model rarely stops in 3
    with pytest.raises(ValueError, match=r"^generate_capped got a budget of 11 tokens: each must be 1\.\.params\.max_new_tokens=10$"):
        eng.generate_capped(prompts, params, seeds, [3, 11, 6])


def test_enforced_budget_samples_exactly_what_a_run_with_that_global_budget_samples(mt):
    """With the setting on, env max_tokens=4 under a global 12 gives the trajectory (ids, log-probs,
    finish reasons, prompts) of a run whose own budget is 4: generation stopped there."""
    model, tok = mt
    capped = _run(tok, HFEngine(model=model, tokenizer=tok), SamplingParams(max_new_tokens=12), max_tokens=4, enforce_env_max_tokens=True)
    plain = _run(tok, HFEngine(model=model, tokenizer=tok), SamplingParams(max_new_tokens=4), max_tokens=4)
    assert _tokens(capped) == _tokens(plain)
    replies = [turn for t in capped for turn in t.turns]
    assert all(len(turn.response_ids) <= 4 for turn in replies)
    assert any(turn.finish_reason == "length" and len(turn.response_ids) == 4 for turn in replies)
    for t in capped:  # the training layout holds the capped replies, nothing past them
        ids, spans, _ = episode_layout(t)
        assert [ids[s:e] for s, e in spans] == [turn.response_ids for turn in t.turns]
    assert "Max response length: 4 words (tokens)." in tok.decode(capped[0].turns[0].prompt_ids)


def test_off_the_hint_is_not_enforced_and_nothing_changes(mt):
    """The setting off (the default) samples the same ids as a runner that never heard of it: replies
    may use the whole global budget, and the prompt still states the env's own max_tokens."""
    model, tok = mt
    sampling = SamplingParams(max_new_tokens=12)
    calls: list[str] = []

    class Spy(HFEngine):
        def generate(self, *args, **kwargs):
            calls.append("generate")
            return super().generate(*args, **kwargs)

        def generate_capped(self, *args, **kwargs):
            calls.append("generate_capped")
            return super().generate_capped(*args, **kwargs)

    off = _run(tok, Spy(model=model, tokenizer=tok), sampling, max_tokens=4, enforce_env_max_tokens=False)
    default = _run(tok, HFEngine(model=model, tokenizer=tok), sampling, max_tokens=4)
    assert _tokens(off) == _tokens(default)
    assert set(calls) == {"generate"}
    assert max(len(turn.response_ids) for t in off for turn in t.turns) > 4
    assert "Max response length: 4 words (tokens)." in tok.decode(off[0].turns[0].prompt_ids)


def test_two_envs_in_one_rollout_get_their_own_budgets_in_one_engine_call(mt):
    _model, tok = mt
    long_reply = tok.encode("I think about it for a long while</think><answer>Up</answer>", add_special_tokens=False)
    eng = ScriptedEngine([long_reply], tok)
    trajs = _run(tok, eng, SamplingParams(max_new_tokens=20), max_tokens=100, pool_budgets=[3, 7], enforce_env_max_tokens=True)
    assert [{len(turn.response_ids) for turn in t.turns} for t in trajs] == [{3}, {7}, {3}, {7}]
    assert all(turn.finish_reason == "length" for t in trajs for turn in t.turns)
    assert len(eng.calls) == 2  # one batch per turn, whatever the budgets
    said = [tok.decode(t.turns[0].prompt_ids) for t in trajs]
    assert ["Max response length: 3 words" in s for s in said] == [True, False, True, False]
    assert ["Max response length: 7 words" in s for s in said] == [False, True, False, True]
    # an env whose max_tokens is above the global budget is held to the global one, and its prompt says so
    (t, *_) = _run(tok, ScriptedEngine([long_reply], tok), SamplingParams(max_new_tokens=5), max_tokens=100, enforce_env_max_tokens=True)
    assert len(t.turns[0].response_ids) == 5 and "Max response length: 5 words (tokens)." in tok.decode(t.turns[0].prompt_ids)


def test_an_engine_without_generate_capped_is_asked_once_per_budget(mt):
    """Any engine works: one that is not an Engine subclass gets one generate call per budget."""
    _model, tok = mt
    inner = ScriptedEngine(["I think about it for a long while</think><answer>Up</answer>"], tok)

    class Bare:
        def generate(self, prompts, params, seeds=None):
            return inner.generate(prompts, params, seeds)

        def rollout_done(self):
            pass

    trajs = _run(tok, Bare(), SamplingParams(max_new_tokens=20), max_tokens=100, pool_budgets=[3, 7], enforce_env_max_tokens=True)
    assert [{len(turn.response_ids) for turn in t.turns} for t in trajs] == [{3}, {7}, {3}, {7}]
    assert len(inner.calls) == 4  # two budgets, two turns
    mine = [derive_seed("rollout", "val", t.seed, t.member, 1) for t in trajs]
    assert inner.seeds[:2] == [mine[0::2], mine[1::2]]  # every episode keeps its own seed


def test_a_duck_typed_engine_that_raises_is_named_by_the_method_it_has(mt):
    """Its generate raised under the caps: the line said 'raised in generate_capped', a method it lacks."""
    from ragen_core.errors import PluginError

    _model, tok = mt

    class Bare:
        def generate(self, prompts, params, seeds=None):
            raise RuntimeError("out of memory")

        def rollout_done(self):
            pass

    with pytest.raises(PluginError) as err:
        _run(tok, Bare(), SamplingParams(max_new_tokens=20), max_tokens=5, enforce_env_max_tokens=True)
    assert err.value.message.endswith("Bare raised in generate: RuntimeError: out of memory"), err.value.message


def test_the_run_setting_reaches_the_runner_and_a_bad_value_is_one_line():
    cfg = load_config(RunConfig, [], ["rollout.enforce_env_max_tokens=true"])
    assert rollout_config(cfg, "train").enforce_env_max_tokens and rollout_config(cfg, "val").enforce_env_max_tokens
    assert not rollout_config(RunConfig(), "train").enforce_env_max_tokens
    with pytest.raises(ConfigError) as err:
        load_config(RunConfig, [], ["rollout.enforce_env_max_tokens=sometimes"])
    assert "\n" not in str(err.value) and "rollout.enforce_env_max_tokens" in str(err.value) and "boolean" in str(err.value)


def test_a_training_run_caps_its_training_and_validation_replies(tmp_path):
    """The run setting reaches both rollouts of a run (train and validation sampling) and what
    the update trains on: every saved reply is within the env's max_tokens of 3 (global budget 10)."""
    import json

    from ragen_core.testing.run_helpers import toy_run_config
    from ragen_core.trainer.trainer import Trainer

    cfg = toy_run_config(tmp_path / "run", "rollout.enforce_env_max_tokens=true", "env_config.max_tokens=3", "save_rollouts=true",
                         "test_freq=1", "save_freq=0", steps=1)
    with Trainer(cfg) as trainer:
        (row,) = trainer.train()
    turns = [turn for line in (tmp_path / "run" / "rollouts" / "step_1.jsonl").read_text().splitlines()
             for turn in json.loads(line)["turns"]]
    assert turns and all(len(turn["response_ids"]) <= 3 for turn in turns)
    assert any(len(turn["response_ids"]) == 3 for turn in turns)
    lengths = {k: v for k, v in row.items() if k.endswith("/response_length")}
    assert any(k.startswith("val") for k in lengths) and all(0 < v <= 3 * 2 for v in lengths.values()), lengths  # 2 turns at most
