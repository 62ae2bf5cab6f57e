"""Warm start: random legal actions in the reply format through the real prompt layout; cached."""

from __future__ import annotations

import pytest

from ragen_core.config import load_config
from ragen_core.interfaces.env import Env, StepResult
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(tmp_path, *extra: str) -> RunConfig:
    env = register_toy_env()
    return load_config(RunConfig, [], [f"env={env}", "env_config.length=4", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
                                       "sampling.train.max_new_tokens=40", "warm_start.episodes=6", "warm_start.epochs=2",
                                       "warm_start.check_episodes=4", "warm_start.max_rounds=1", "warm_start.start_from=scratch",
                                       # one round, measured but not gated (the gate's own tests set a target)
                                       "warm_start.target_valid_rate=0",
                                       f"warm_start.cache_dir={tmp_path / 'cache'}", *extra])


def test_demonstrations_are_valid_random_actions_in_reply_format(tmp_path):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    trajs = demonstrations(_cfg(tmp_path), tok)
    assert len(trajs) == 6
    turns = [t for tr in trajs for t in tr.turns]
    assert turns and all(t.valid for t in turns)
    assert all(t.response_text.startswith("<think>") and "</think> <answer> " in t.response_text and t.response_text.endswith(" </answer>")
               for t in turns)
    assert {a for t in turns for a in t.actions} <= {"Left", "Right"}
    # random, not an oracle: some episodes walk the wrong way
    assert len({tuple(a for t in tr.turns for a in t.actions) for tr in trajs}) > 1
    assert all(tr.env == "toy-corridor" for tr in trajs)


def test_action_kinds_name_command_style_actions_and_share_them():
    from ragen_core.trainer.warmstart import action_kind, describe_kinds, kind_shares

    assert [action_kind(a) for a in ["search[who is x]", "finish[42]", " click[Buy Now]", "Up", "Bandit-A", "(1, 2, 3)", "3 + 4 * 2",
                                     "def f(x):", ""]] == ["search", "finish", "click", "Up", "Bandit-A", "other", "other", "other", "other"]
    assert kind_shares(["finish[a]", "search[b]", "finish[c]", "finish[d]"]) == {"finish": 0.75, "search": 0.25}
    assert list(kind_shares(["b[x]", "a[y]"])) == ["a", "b"]  # ties by name
    assert kind_shares([]) == {}
    assert describe_kinds({"a": 0.5, "b": 0.25, "c": 0.125, "d": 0.125}) == "a 0.50, b 0.25, c 0.12, ..."
    assert describe_kinds({}) == "-"


class _GuessEnv(Env):
    """A free-text env (no action_names): one turn, any ``guess[N]``; random_action draws N."""

    def instruction(self):
        return "Guess a number as guess[N]."

    def reset(self, seed, *, member=0, mode="train"):
        self.seed = seed
        return f"episode {seed}-{member}"

    def render(self):
        return f"episode {self.seed}"

    def step(self, action):
        return StepResult("done", 0.0, True, {"success": False, "action_is_valid": action.startswith("guess[")})

    def random_action(self, rng):
        return f"guess[{int(rng.integers(10**6))}]"


def test_demonstrations_of_a_free_text_env_draw_each_episodes_action_on_its_own(tmp_path):
    """Each recording env once drew from one stream seeded alike for every instance: all of a round's
    episodes took the same branch (every SearchQA demo of a round searched, or every one finished)."""
    from ragen_core import registry
    from ragen_core.interfaces.env import EnvConfig
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.specs import EnvSpec
    from ragen_core.trainer.warmstart import demonstrations

    registry.register(EnvSpec(name="warmstart-test-guess", config_model=EnvConfig, factory=f"{__name__}:_GuessEnv"))
    _, tok = load_model_and_tokenizer("tiny")
    cfg = load_config(RunConfig, [], ["env=warmstart-test-guess", "sampling.train.max_new_tokens=40", "warm_start.episodes=8",
                                      "warm_start.stray_share=0",  # (strays repeat another state's draw on purpose)
                                      f"warm_start.cache_dir={tmp_path / 'cache'}"])
    trajs = demonstrations(cfg, tok)
    guesses = [tr.turns[0].answer for tr in trajs]
    assert len(guesses) == 8 and all(g.startswith("guess[") for g in guesses)
    assert len(set(guesses)) == 8  # one draw per episode (a shared stream gives 8 equal guesses)
    assert [tr.turns[0].answer for tr in demonstrations(cfg, tok)] == guesses  # and still seeded
    assert [tr.turns[0].answer for tr in demonstrations(cfg, tok, round_no=1)] != guesses


def test_demonstrations_record_in_process_whatever_pool_training_uses(tmp_path):
    """The recording envs run in a local pool built for the demo rollout (nothing registered), so a
    run configured with worker processes gets the very same demonstrations."""
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    local = demonstrations(_cfg(tmp_path), tok)
    spawned = demonstrations(_cfg(tmp_path, "rollout.pool=process"), tok)
    def pairs(trajs):
        return [[(t.prompt_ids, t.response_ids) for t in tr.turns] for tr in trajs]

    assert pairs(spawned) == pairs(local)


def test_warm_start_lowers_reply_loss_and_is_cached(tmp_path, capsys):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import cache_key, demonstrations, sft, warm_start

    cfg = _cfg(tmp_path)
    model, tok = load_model_and_tokenizer("tiny")
    losses = sft(model, tok, demonstrations(cfg, tok), epochs=4, lr=3e-3, batch_size=6, seed=0)
    assert losses[-1] < losses[0]
    fresh, _ = load_model_and_tokenizer("tiny")
    warm = warm_start(cfg, fresh, tok)
    folder = tmp_path / "cache" / cache_key(cfg)
    assert (folder / "config.json").is_file()
    again = warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)
    assert "using cached model" in capsys.readouterr().out
    assert all(torch.equal(a, b) for a, b in zip(warm.state_dict().values(), again.state_dict().values()))
    assert cache_key(cfg) != cache_key(cfg.model_copy(update={"seed": 1}))


def test_cached_prefix_logprobs_equal_full_forward(tmp_path):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.modeling import token_logprobs
    from ragen_core.trainer.warmstart import demonstrations, reply_logprobs

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "env_config.max_turns=3", "warm_start.episodes=4")
    batch = build_batch(demonstrations(cfg, tok), tok.pad_token_id)
    full, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    cached, mask = reply_logprobs(model, batch)
    assert int(mask.sum()) == int(batch.response_mask.sum()) > 0
    # cached prefix vs full forward reorder the float32 sums: bound ~84 eps * (1 + |lp|), measured <= 2 % of it
    assert torch.allclose(full[batch.response_mask > 0], cached[mask > 0], atol=1e-5)


def _scripted_engine(tok, good_rows):
    from ragen_core.engines.scripted import ScriptedEngine

    def script(call, row, prompt):
        return "<think>go</think><answer>Right</answer>" if row in good_rows else "<think>go</think><answer>Jump</answer>"

    return ScriptedEngine(script, tok)


def test_valid_rate_counts_parsed_known_actions_with_the_real_runner(tmp_path, monkeypatch):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import setup
    from ragen_core.trainer.warmstart import valid_rate

    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "env_config.max_turns=1", "warm_start.check_episodes=8")
    engines, closed = [], []

    def make(c, m, t):
        engine = _scripted_engine(t, {0, 3, 5})
        engine.close = lambda: closed.append(engine)  # type: ignore[method-assign]
        engines.append(engine)
        return engine

    monkeypatch.setattr(setup, "make_engine", make)
    assert valid_rate(cfg, model, tok) == pytest.approx(3 / 8)  # rows 0, 3, 5 name a known action; "Jump" is unknown
    assert len(engines[0].calls) == 1 and len(engines[0].calls[0]) == 8
    assert closed == engines  # the check closes the engine it made (a vLLM one holds GPU memory)
    from ragen_core.trainer.warmstart import format_check

    assert format_check(cfg, model, tok).action_kinds == {"Right": 1.0}  # "Jump" replies are not well formed
    assert valid_rate(cfg, model, tok, episodes=4) == pytest.approx(2 / 4)
    # an untrained tiny model never produces the reply format
    monkeypatch.undo()
    assert valid_rate(cfg, model, tok, episodes=4) == 0.0


@pytest.mark.parametrize(("rates", "target", "rounds", "reached"), [([0.2, 0.95, 1.0], 0.9, 2, True), ([0.1, 0.1, 0.1], 0.9, 3, False),
                                                                    ([0.0], 0.0, 1, True)])
def test_quality_gate_adds_rounds_until_target_or_budget(tmp_path, monkeypatch, capsys, rates, target, rounds, reached):
    import json

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warmstart

    seen = iter(rates)
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(next(seen), ["<think>x"]))
    grown = []
    real_sft = warmstart.sft
    monkeypatch.setattr(warmstart, "sft", lambda m, t, trajs, **kw: grown.append(len(trajs)) or real_sft(m, t, trajs, **{**kw, "epochs": 1}))
    cfg = _cfg(tmp_path, f"warm_start.target_valid_rate={target}", "warm_start.max_rounds=3", "warm_start.episodes=3",
               "warm_start.on_gate_miss=continue")
    model, tok = load_model_and_tokenizer("tiny")
    warm = warmstart.warm_start(cfg, model, tok)
    assert grown == [3 * (i + 1) for i in range(rounds)]  # each round adds fresh demonstrations
    meta = warm.ragen_warm_start
    assert meta["rounds"] == rounds and meta["valid_rate"] == rates[rounds - 1] and meta["reached_target"] is reached
    assert [h["valid_rate"] for h in meta["history"]] == rates[:rounds]
    assert all(h["sample_replies"] == ["<think>x"] for h in meta["history"])  # each round keeps its own measurement's replies
    out = capsys.readouterr().out
    assert f"valid rate {rates[rounds - 1]:.3f}" in out
    assert ("missed its gate" in out) is (not reached)
    folder = tmp_path / "cache" / warmstart.cache_key(cfg)
    if not reached:  # a missed gate is never cached (more in tests/test_warmstart_gate.py)
        assert not folder.exists()
        return
    record = json.loads((folder / warmstart.META_FILE).read_text())
    assert record["valid_rate"] == rates[rounds - 1]
    assert record["settings"]["warm_start"]["episodes"] == 3 and record["settings"]["seed"] == cfg.seed  # how to make it again
    assert record["check_temperature"] == cfg.sampling.train.temperature
    again = warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)  # cached: no new measurement
    assert again.ragen_warm_start == meta
    assert f"using cached model {folder} (valid rate {rates[rounds - 1]:.3f})" in capsys.readouterr().out


def test_round_seeds_differ_so_demonstrations_are_new(tmp_path):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path)
    first, second = demonstrations(cfg, tok), demonstrations(cfg, tok, round_no=1)
    assert {t.seed for t in first}.isdisjoint({t.seed for t in second})


def test_prompt_loss_weight_trains_on_all_tokens_and_reports_reply_loss(tmp_path):
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.modeling import token_logprobs
    from ragen_core.trainer.warmstart import demonstrations, sft

    model, tok = load_model_and_tokenizer("tiny")
    trajs = demonstrations(_cfg(tmp_path), tok)
    batch = build_batch(trajs, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    reply0 = float(-(logp * batch.response_mask).sum() / batch.response_mask.sum())
    prompt_mask = batch.attention_mask[:, 1:].float() * (1 - batch.response_mask)
    prompt0 = float(-(logp * prompt_mask).sum() / prompt_mask.sum())
    losses = sft(model, tok, trajs, epochs=3, lr=3e-3, batch_size=len(trajs), seed=0, prompt_loss_weight=1.0)
    # one full batch: the first reported loss is the reply loss before any step; the SFT forward may batch
    # its sums differently: rel 1e-4 is ~800 eps for a mean of log-probs (measured identical)
    assert losses[0] == pytest.approx(reply0, rel=1e-4)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    assert float(-(logp * prompt_mask).sum() / prompt_mask.sum()) < prompt0  # the prompt tokens were trained too
    assert losses[-1] < losses[0]


def test_demo_options_spaced_replies_chosen_thoughts_and_fewer_turns(tmp_path):
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "env_config.max_turns=3", "warm_start.spaced=true", 'warm_start.thoughts=["go {a}"]', "warm_start.max_turns=1")
    trajs = demonstrations(cfg, tok)
    assert all(len(tr.turns) == 1 for tr in trajs)  # demonstrations stop after warm_start.max_turns
    for turn in (tr.turns[0] for tr in trajs):
        (action,) = turn.actions
        assert turn.valid and turn.response_text == f"<think> go {action} </think> <answer> {action} </answer>"


def test_cache_key_ignores_batch_shape_and_env_pool_but_not_prompt_layout(tmp_path):
    from ragen_core.trainer.warmstart import cache_key

    cfg = _cfg(tmp_path)
    reshaped = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"env_groups": 7, "group_size": 3})})
    assert cache_key(reshaped) == cache_key(cfg)
    # where the envs run is no prompt layout: a local warm start serves a run with --workers process
    moved = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"pool": "process",
                                                                             "pool_config": {"workers": 2, "step_timeout_s": 5.0}})})
    assert cache_key(moved) == cache_key(cfg)
    for change in ({"max_turns": 2}, {"enable_think": False}, {"max_model_len": 512}):
        other = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update=change)})
        assert cache_key(other) != cache_key(cfg), change


def test_balanced_picks_show_every_action_of_a_state_equally_often_in_random_order():
    from collections import Counter

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import DemoEngine

    _, tok = load_model_and_tokenizer("tiny")
    actions = ["Up", "Down", "Left"]
    orders = set()
    for seed in range(4):
        engine = DemoEngine(tok, seed=seed, balance={})
        picks = [engine.pick(actions, "state A") for _ in range(30)]
        assert Counter(picks) == {a: 10 for a in actions}
        assert all(set(picks[i : i + 3]) == set(actions) for i in range(0, 30, 3))  # each pass shows all of them
        orders.add(tuple(picks[:3]))
        assert engine.pick(["Left", "Right"], "state B") in {"Left", "Right"}  # states keep separate queues
        assert engine.pick(["Stay"], "state A") == "Stay"  # a queue holding actions no longer legal is refilled
    assert len(orders) > 1  # random order, not a fixed cycle
    # independent draws (the unbalanced mode) are lopsided on some seed
    lopsided = [Counter(DemoEngine(tok, seed=s).pick(actions) for _ in range(30)) for s in range(4)]
    assert any(max(c.values()) - min(c.get(a, 0) for a in actions) > 1 for c in lopsided)


def test_balanced_demonstrations_even_out_actions_per_state_across_rounds(tmp_path):
    from collections import Counter, defaultdict

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations

    _, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(tmp_path, "warm_start.episodes=7")
    balance: dict[str, list[str]] = {}
    per_state: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    for rnd in range(2):
        for tr in demonstrations(cfg, tok, round_no=rnd, balance=balance):
            per_state[tuple(tr.turns[0].prompt_ids)][tr.turns[0].actions[0]] += 1
    counts = [c for c in per_state.values() if sum(c.values()) >= 2]
    assert counts  # some start state recurs across the 14 episodes
    for c in counts:
        assert max(c.get(a, 0) for a in ("Left", "Right")) - min(c.get(a, 0) for a in ("Left", "Right")) <= 1


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_sft_lr_schedule(tmp_path, schedule):
    import itertools

    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.warmstart import demonstrations, sft

    model, tok = load_model_and_tokenizer("tiny")
    trajs = demonstrations(_cfg(tmp_path), tok)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seen: list[float] = []
    opt.register_step_pre_hook(lambda o, *_: seen.append(o.param_groups[0]["lr"]))
    losses = sft(model, tok, trajs, epochs=4, lr=2e-3, batch_size=3, seed=0, optimizer=opt, schedule=schedule)
    assert len(seen) == len(losses) == 8 and seen[0] == pytest.approx(2e-3)
    if schedule == "constant":
        assert seen == [pytest.approx(2e-3)] * 8
    else:  # decays towards 0 within the call
        assert all(a > b for a, b in itertools.pairwise(seen)) and seen[-1] < 0.1 * 2e-3


def test_warm_start_trains_windowed_multi_turn_demonstrations_per_turn(tmp_path):
    """last-k context: later prompts do not extend earlier ones, so each turn is its own SFT row."""
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer.batch import build_batch
    from ragen_core.trainer.warmstart import demonstrations, warm_start

    cfg = _cfg(tmp_path, "rollout.extra.context_window=last-k", "rollout.extra.max_context_turns=1")
    model, tok = load_model_and_tokenizer("tiny")
    trajs = demonstrations(cfg, tok)
    assert max(len(t.turns) for t in trajs) == 2
    with pytest.raises(ValueError, match="full"):
        build_batch(trajs, tok.pad_token_id)
    warm = warm_start(cfg, model, tok, verbose=False)
    assert warm.ragen_warm_start["history"][0]["sft_steps"] > 0


def test_stray_actions_show_the_reply_format_after_a_rejected_move():
    """Sudoku's random actions are legal placements ("Valid move" every time); with
    ``warm_start.stray_share`` a share of its states get a placement drawn for another state,
    which the board rejects (a clash, a filled cell) while the reply stays well formed."""
    pytest.importorskip("ragen_env_sudoku")
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.trainer.warmstart import demonstrations, well_formed

    tok = build_byte_tokenizer()

    def turns(env: str, share: float) -> list:
        cfg = load_config(RunConfig, [], [f"env={env}", f"warm_start.stray_share={share}", "warm_start.episodes=8"])
        return [t for tr in demonstrations(cfg, tok) for t in tr.turns]

    legal_only = turns("sudoku", 0.0)
    assert legal_only and all(t.info.get("action_is_valid") is True for t in legal_only)
    mixed = turns("sudoku", 0.5)
    rejected = [t for t in mixed if t.info.get("action_is_valid") is False]
    assert 0 < len(rejected) < len(mixed)
    assert all(t.valid and well_formed(t.info) for t in mixed)  # the format is always right
    # an env with action names keeps its legal-action demonstrations
    assert [t.response_text for t in turns(register_toy_env(), 0.0)] == [t.response_text for t in turns(register_toy_env(), 0.5)]


def test_recording_env_takes_a_plain_four_tuple_as_pools_do():
    """An env whose step returns ``(obs, reward, done, info)`` passed the conformance kit and the pools,
    then the warm start's recorder failed on it: "'tuple' object has no attribute 'observation'"."""
    from ragen_core.testing.toy_env import CorridorEnv
    from ragen_core.trainer.warmstart import RecordingEnv

    class TupleCorridor(CorridorEnv):
        def step(self, action):
            return tuple(super().step(action))

    legal: dict = {}
    env = RecordingEnv(TupleCorridor(), seed=0, legal=legal)
    first = env.reset(3)
    obs, reward, done, info = env.step("Right")
    assert set(legal) == {first, obs} and all(legal[o] == ["Left", "Right"] for o in legal)


def test_an_interrupted_warm_start_resumes_after_its_last_finished_round(tmp_path, monkeypatch, capsys):
    """A SIGTERM or Ctrl-C during a warm start threw away the rounds it had finished (helper-63's walk); the next run
    resumes after them and ends with the uninterrupted warm start's weights, bit for bit."""
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warmstart

    rates = [0.2, 0.3, 0.95]
    measured = {"calls": 0}

    def check(*args, **kwargs):
        measured["calls"] += 1
        return warmstart.FormatCheck(rates[measured["calls"] - 1], ["<think>x"])

    monkeypatch.setattr(warmstart, "format_check", check)
    settings = ("warm_start.target_valid_rate=0.9", "warm_start.max_rounds=3", "warm_start.episodes=3", "warm_start.epochs=1")
    whole = warmstart.warm_start(_cfg(tmp_path / "whole", *settings), load_model_and_tokenizer("tiny")[0], load_model_and_tokenizer("tiny")[1])
    assert [h["valid_rate"] for h in whole.ragen_warm_start["history"]] == rates

    cfg = _cfg(tmp_path / "cut", *settings)
    rounds_dir = warmstart.rounds_folder(tmp_path / "cut" / "cache" / warmstart.cache_key(cfg))
    measured["calls"] = 0
    real_sft, sft_calls = warmstart.sft, []

    def stopped_in_round_3(*args, **kwargs):
        sft_calls.append(1)
        if len(sft_calls) == 3:
            raise KeyboardInterrupt  # what SIGTERM (ragen's Terminated) or Ctrl-C raises
        return real_sft(*args, **kwargs)

    monkeypatch.setattr(warmstart, "sft", stopped_in_round_3)
    model, tok = load_model_and_tokenizer("tiny")
    with pytest.raises(KeyboardInterrupt):
        warmstart.warm_start(cfg, model, tok)
    assert (rounds_dir / "rounds.pt").is_file() and not (tmp_path / "cut" / "cache" / warmstart.cache_key(cfg)).exists()
    monkeypatch.setattr(warmstart, "sft", real_sft)
    measured["calls"] = 2  # rounds 1 and 2 were measured before the interruption
    capsys.readouterr()
    resumed = warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], tok)
    assert f"resuming after round 2 of an interrupted warm start of these settings (saved in {rounds_dir}; valid rate then 0.300)" \
        in capsys.readouterr().out
    assert measured["calls"] == 3  # one more round, not three
    assert [h["valid_rate"] for h in resumed.ragen_warm_start["history"]] == rates
    assert [h["sft_steps"] for h in resumed.ragen_warm_start["history"]] == [h["sft_steps"] for h in whole.ragen_warm_start["history"]]
    want, got = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)  # the same demonstrations, optimiser state and seeds
    assert not rounds_dir.exists()  # finished: the cache holds the result


def test_two_writers_of_one_warm_starts_rounds_and_cache_do_not_collide(tmp_path, capsys):
    """Runs that differ only in RL settings share a warm-start key: their round files shared one temporary name, so
    one's rename took the other's file away (FileNotFoundError, a crashed warm start); likewise the cache's .tmp folder
    (helper-73's review). A write that fails is a warning, not the end of the warm start."""
    import threading

    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warmstart

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    rounds = tmp_path / "key.rounds"
    errors: list[BaseException] = []

    def writer():
        try:
            for _ in range(15):
                warmstart.save_rounds(rounds, model, opt, {"history": [{"valid_rate": 0.5}], "steps": 3, "elapsed": 1.0})
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and "could not keep" not in capsys.readouterr().err
    assert sorted(p.name for p in rounds.iterdir()) == ["rounds.pt"]  # no temporary file left behind
    assert warmstart.load_rounds(rounds, torch.nn.Linear(4, 4), torch.optim.AdamW(model.parameters()))["steps"] == 3

    blocked = tmp_path / "a file"
    blocked.write_text("x")
    warmstart.save_rounds(blocked / "key.rounds", model, opt, {"history": [], "steps": 0, "elapsed": 0.0})
    assert "warning: warm start: could not keep its finished rounds in" in capsys.readouterr().err

    from ragen_core.trainer.checkpoint import current_umask

    assert (rounds / "rounds.pt").stat().st_mode & 0o777 == 0o666 & ~current_umask()  # not mkstemp's 0600 (helper-74's review)

    tiny, tok = load_model_and_tokenizer("tiny")
    cached = tmp_path / "cache" / "key"
    for _ in range(2):  # the second writer finds the folder there: its own copy goes, the first stands
        warmstart.save_cached(cached, tiny, tok, {"valid_rate": 1.0}, stale=False)
    assert sorted(p.name for p in cached.parent.iterdir()) == ["key"]

    class FullDisk:
        def save_pretrained(self, folder):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        warmstart.save_cached(tmp_path / "cache" / "other", tiny, FullDisk(), {"valid_rate": 1.0}, stale=False)
    assert sorted(p.name for p in cached.parent.iterdir()) == ["key"]  # no half-written copy of the model left behind


def test_a_cached_warm_start_trains_in_the_dtype_the_run_chose(tmp_path):
    """A cache hit loaded the cached dtype: optim.float32_weights (or a bfloat16 run) was silently undone (helper-73's review)."""
    import torch

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warmstart

    cfg = _cfg(tmp_path)
    model, tok = load_model_and_tokenizer("tiny")
    warmstart.warm_start(cfg, model, tok, verbose=False)  # cached in float32
    again = warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0].to(torch.bfloat16), tok, verbose=False)
    assert {p.dtype for p in again.parameters()} == {torch.bfloat16}


def test_a_warm_start_removes_rounds_no_run_resumed_for_a_week(tmp_path, monkeypatch, capsys):
    """A ``.rounds`` folder (a model and its optimiser state) of settings no run uses again was never removed
    (helper-74's review): a warm start removes those not written for ROUNDS_KEPT_DAYS, and keeps recent ones."""
    import os
    import time

    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warmstart

    root = tmp_path / "cache"
    week = warmstart.ROUNDS_KEPT_DAYS * 86400
    planted = {}
    for name, age in {"old.rounds": week + 3600, "recent.rounds": week - 3600, "old-cached-model": week + 3600}.items():
        (root / name).mkdir(parents=True)
        (root / name / "rounds.pt").write_bytes(b"x")
        for path in (root / name / "rounds.pt", root / name):
            os.utime(path, (time.time() - age, time.time() - age))
        planted[name] = root / name
    os.utime(planted["old.rounds"] / "rounds.pt")  # its file is new: the folder's newest write counts
    (root / "stale.rounds").mkdir()
    (root / "stale.rounds" / "rounds.pt").write_bytes(b"x")
    for path in (root / "stale.rounds" / "rounds.pt", root / "stale.rounds"):
        os.utime(path, (time.time() - week - 60, time.time() - week - 60))

    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(0.95, ["<think>x"]))
    real_sft = warmstart.sft
    monkeypatch.setattr(warmstart, "sft", lambda m, t, trajs, **kw: real_sft(m, t, trajs, **{**kw, "epochs": 1}))
    cfg = _cfg(tmp_path, "warm_start.episodes=2")
    warmstart.warm_start(cfg, load_model_and_tokenizer("tiny")[0], load_model_and_tokenizer("tiny")[1])
    assert sorted(p.name for p in root.iterdir()) == sorted(["old.rounds", "recent.rounds", "old-cached-model", warmstart.cache_key(cfg)])
    assert f"warm start: removed 1 interrupted warm start(s) not resumed for 7 days from {root} (stale.rounds)" in capsys.readouterr().out
    assert warmstart.remove_old_rounds(root, keep=root / "x.rounds", now=time.time() + week) == [root / "old.rounds", root / "recent.rounds"]
