"""The shipped warm policy: how it is built, recorded, found and used by a run's warm start.

The mechanism tests build a small policy for the in-process corridor env (seconds); the last test
loads the policy that ships in this repository and lets it play every env it was built for.
"""

from __future__ import annotations

import json

import pytest

from ragen_core.config import load_config
from ragen_core.errors import RagenError
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer import warm_policy, warmstart
from ragen_core.trainer.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(*extra: str) -> RunConfig:
    return load_config(RunConfig, [], [f"env={register_toy_env()}", *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A one-round policy for the corridor env, written like the shipped one."""
    out = tmp_path_factory.mktemp("warm-policy")
    register_toy_env()
    record = warm_policy.build(out, [register_toy_env()], episodes=4, demo_turns=1, epochs=1, max_rounds=1, check_episodes=2,
                               recipes=False, progress=False, log=lambda *_: None)
    return out, record


def test_the_check_key_follows_what_a_format_check_depends_on_only():
    base = warm_policy.check_key(_cfg())
    assert warm_policy.check_key(_cfg("seed=7", "rollout.env_groups=9", "rollout.group_size=3", "warm_start.episodes=5")) == base
    assert warm_policy.check_key(_cfg("env_config.length=7")) != base
    from ragen_core import registry

    default_length = registry.make_config("env", register_toy_env()).length  # type: ignore[attr-defined]
    assert warm_policy.check_key(_cfg(f"env_config.length={default_length}")) == base  # spelling out a default changes nothing
    assert warm_policy.check_key(_cfg("sampling.train.temperature=0.5")) != base
    assert warm_policy.check_key(_cfg("sampling.train.max_new_tokens=20")) != base
    assert warm_policy.check_key(_cfg("rollout.enable_think=false")) != base
    # a setting added after the shipped builds: off (its default) keeps their keys, on is another check
    assert warm_policy.check_key(_cfg("rollout.enforce_env_max_tokens=false")) == base
    assert "enforce_env_max_tokens" not in warm_policy.check_payload(_cfg())["rollout"]
    assert warm_policy.check_key(_cfg("rollout.enforce_env_max_tokens=true")) != base


@pytest.mark.parametrize(("env", "same", "other"), [
    ("webshop", ["env_config.shop=server", "env_config.server.ready_timeout_s=99", "env_config.server.max_restarts=9",
                 "env_config.request_timeout_s=60"],
     ["env_config.shop=server", "env_config.server.url=http://127.0.0.1:9"]),
    ("searchqa", ["env_config.server.max_restarts=9", "env_config.server.log_dir=/tmp/x"], ["env_config.server.url=http://127.0.0.1:9"]),
])
def test_where_an_env_runs_keeps_the_check_key_but_another_server_address_does_not(env, same, other):
    """Running WebShop through its HTTP shop, or a server's start/restart settings, made a run spend a
    32-episode check of the shipped policy (and miss its cached warm start) as if the env had changed;
    a server at another URL may hold another catalog or corpus, so that still counts."""
    from ragen_core import registry

    if env not in registry.names("env"):
        pytest.skip(f"the {env} env is not installed")
    base = warm_policy.check_key(load_config(RunConfig, [], [f"env={env}"]))
    assert warm_policy.check_key(load_config(RunConfig, [], [f"env={env}", *same])) == base
    assert warm_policy.check_key(load_config(RunConfig, [], [f"env={env}", *other])) != base
    assert warm_policy.check_key(load_config(RunConfig, [], [f"env={env}", "env_config.max_turns=2"])) != base


def test_a_build_records_command_settings_weights_and_each_targets_measurement(built):
    out, record = built
    on_disk = json.loads((out / "build.json").read_text())
    assert on_disk == record
    assert record["format"] == warm_policy.FORMAT and record["settings"]["episodes"] == 4 and record["settings"]["dtype"] == "float16"
    assert record["command"] and "seconds" in record and len(record["history"]) == 1
    (target,) = record["targets"]
    assert target["env"] == register_toy_env() and target["check_key"] == warm_policy.check_key(_cfg())
    assert 0.0 <= target["valid_rate"] <= 1.0 and target["reached_target"] == (target["valid_rate"] >= 0.9)
    # what the well-formed replies of the kept round's check did, by kind of action
    assert target["action_kinds"] == record["history"][0]["action_kinds"][target["label"]]
    assert set(target["action_kinds"]) <= {"Left", "Right"}
    assert not target["action_kinds"] or abs(sum(target["action_kinds"].values()) - 1) < 1e-3  # (shares rounded to 4 places)
    import hashlib

    from safetensors.torch import load_file

    weights = load_file(str(out / "model.safetensors"))
    assert {str(v.dtype) for v in weights.values()} == {"torch.float16"}
    assert "lm_head.weight" not in weights  # tied to the embedding
    assert record["weights_sha256"] == hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    # the weights are as readable as the folder's other files (safetensors wrote them 0600: helper-71's walk)
    assert len({oct(p.stat().st_mode & 0o777) for p in out.iterdir() if p.is_file()}) == 1


def test_a_build_continued_from_a_policy_starts_from_its_weights_and_names_it(built, tmp_path, capsys):
    import torch

    from ragen_core.models import load_model_and_tokenizer

    out, first = built
    seen: list[torch.Tensor] = []
    original = warm_policy.ShippedPolicy.load_into

    def load_and_keep(self, model):
        original(self, model)
        seen.append(model.get_input_embeddings().weight.detach().clone())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(warm_policy.ShippedPolicy, "load_into", load_and_keep)
        record = warm_policy.build(tmp_path / "next", [register_toy_env()], episodes=4, demo_turns=1, epochs=1, max_rounds=1,
                                   check_episodes=2, recipes=False, progress=False, init_from=out, log=lambda *_: None)
    fresh, _ = load_model_and_tokenizer("tiny")
    warm_policy.shipped_policy(out).load_into(fresh)
    assert torch.equal(seen[0], fresh.get_input_embeddings().weight)  # the build started from the policy's weights
    start = record["init_from"]
    assert start["weights_sha256"] == first["weights_sha256"] and start["rounds"] == 1 and start["folder"] == out.name
    assert record["history"][0]["round"] == 2  # round numbers (and demonstration seeds) go on from the first build's
    behind = not first["targets"][0]["reached_target"]  # as its base measured it: twice the demonstrations when behind
    assert record["history"][0]["demonstrations"] == (8 if behind else 4)
    assert record["seconds_with_init"] >= record["seconds"] + first["seconds"] - 0.2  # both rounded to 0.1 s
    assert record["weights_sha256"] != first["weights_sha256"]
    from ragen_core.cli.warm_policy import _show

    capsys.readouterr()
    _show(record)  # what `ragen warm-policy show` prints: the chain of builds back to the first
    shown = capsys.readouterr().out
    assert f"continued from {out.name} (weights {first['weights_sha256'][:16]}, rounds up to 1" in shown
    assert f"({record['seconds_with_init']} s with the builds it continued)" in shown
    with pytest.raises(RagenError, match="not a built warm policy"):
        warm_policy.build(tmp_path / "x", [register_toy_env()], max_rounds=1, recipes=False, progress=False, init_from=tmp_path,
                          log=lambda *_: None)


def test_a_shipped_policy_loads_into_a_fresh_tiny_model(built):
    import torch

    from ragen_core.models import load_model_and_tokenizer

    out, _ = built
    policy = warm_policy.shipped_policy(out)
    assert policy is not None and policy.target(_cfg("seed=3")) is not None and policy.target(_cfg("env_config.length=9")) is None
    model, _ = load_model_and_tokenizer("tiny")
    policy.load_into(model)
    from safetensors.torch import load_file

    saved = load_file(str(out / "model.safetensors"))
    for name, value in model.state_dict().items():
        expected = saved["model.embed_tokens.weight"] if name == "lm_head.weight" else saved[name]
        assert value.dtype == torch.float32 and torch.equal(value, expected.float()), name


def test_a_folder_of_another_format_or_without_weights_is_not_a_shipped_policy(built, tmp_path):
    out, record = built
    (tmp_path / "build.json").write_text(json.dumps({**record, "format": warm_policy.FORMAT + 1}))
    assert warm_policy.shipped_policy(tmp_path) is None
    (tmp_path / "build.json").write_text(json.dumps(record))
    assert warm_policy.shipped_policy(tmp_path) is None  # no model.safetensors
    assert warm_policy.shipped_policy(tmp_path / "missing") is None


def _shipped_with_rate(monkeypatch, built, tmp_path, rate: float):
    """The built policy as the shipped one, its corridor measurement set to ``rate``."""
    import shutil

    out, record = built
    folder = tmp_path / "warm" / warm_policy.GENERAL
    shutil.copytree(out, folder)
    record = json.loads(json.dumps(record))
    record["targets"][0]["valid_rate"] = rate
    (folder / "build.json").write_text(json.dumps(record))
    monkeypatch.setattr(warm_policy, "SHIPPED_ROOT", tmp_path / "warm")
    return folder


def test_a_run_on_a_measured_target_starts_from_the_shipped_weights_without_training(monkeypatch, built, tmp_path, capsys):
    from ragen_core.models import load_model_and_tokenizer

    _shipped_with_rate(monkeypatch, built, tmp_path, 0.97)
    calls = []
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: calls.append(1) or warmstart.FormatCheck(0.0))
    monkeypatch.setattr(warmstart, "sft", lambda *a, **k: pytest.fail("no SFT for a measured target"))
    model, tok = load_model_and_tokenizer("tiny")
    warm = warmstart.warm_start(_cfg(f"warm_start.cache_dir={tmp_path / 'cache'}"), model, tok)
    meta = warm.ragen_warm_start
    assert meta["source"] == "shipped" and meta["valid_rate"] == 0.97 and meta["reached_target"] is True and meta["rounds"] == 0
    assert calls == [] and "the shipped warm policy (valid rate 0.970" in capsys.readouterr().out
    fresh = load_model_and_tokenizer("tiny")[0]
    assert not all(a.equal(b) for a, b in zip(warm.state_dict().values(), fresh.state_dict().values()))


def test_a_run_below_the_measured_rate_or_off_target_checks_then_trains_further_from_the_shipped_weights(monkeypatch, built, tmp_path, capsys):
    from ragen_core.models import load_model_and_tokenizer

    _shipped_with_rate(monkeypatch, built, tmp_path, 0.5)  # below the default target 0.9
    rates = iter([0.4, 0.95])  # the shipped weights as they are, then after one SFT round
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(next(rates)))
    starts = []

    def sft(model, *a, **k):
        starts.append(model.model.embed_tokens.weight.detach().clone())
        return [1.0]

    monkeypatch.setattr(warmstart, "sft", sft)
    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(f"warm_start.cache_dir={tmp_path / 'cache'}", "warm_start.episodes=2", "warm_start.max_rounds=2")
    warm = warmstart.warm_start(cfg, model, tok)
    out = capsys.readouterr().out
    assert "writes 0.400 valid replies on these env settings (target 0.90); training it further" in out
    assert warm.ragen_warm_start["source"] == "shipped" and warm.ragen_warm_start["reached_target"] is True
    from safetensors.torch import load_file

    shipped = load_file(str(tmp_path / "warm" / warm_policy.GENERAL / "model.safetensors"))["model.embed_tokens.weight"].float()
    assert len(starts) == 1 and starts[0].equal(shipped)  # SFT started from the shipped weights
    assert (warmstart.cache_folder(cfg) / "config.json").is_file()  # and the result is cached as before


@pytest.mark.parametrize("measured", [0.5, 0.92])  # below the gate; at it, but within one check's noise (AS_IS_MARGIN)
def test_a_check_that_passes_caches_the_shipped_weights_for_the_next_run(monkeypatch, built, tmp_path, measured):
    from ragen_core.models import load_model_and_tokenizer

    assert warm_policy.used_as_is({"valid_rate": 0.95}, 0.9) and not warm_policy.used_as_is({"valid_rate": measured}, 0.9)
    assert warm_policy.used_as_is({"valid_rate": 1.0}, 0.99) and warm_policy.used_as_is({"valid_rate": 0.05}, 0.0)
    _shipped_with_rate(monkeypatch, built, tmp_path, measured)
    monkeypatch.setattr(warmstart, "format_check", lambda *a, **k: warmstart.FormatCheck(0.92))
    model, tok = load_model_and_tokenizer("tiny")
    cfg = _cfg(f"warm_start.cache_dir={tmp_path / 'cache'}")
    warm = warmstart.warm_start(cfg, model, tok)
    assert warm.ragen_warm_start["measured"] == "checked by this run" and warm.ragen_warm_start["valid_rate"] == 0.92
    assert json.loads((warmstart.cache_folder(cfg) / warmstart.META_FILE).read_text())["source"] == "shipped"


def test_scratch_and_other_models_never_use_the_shipped_policy(monkeypatch, built, tmp_path):
    folder = _shipped_with_rate(monkeypatch, built, tmp_path, 0.97)
    assert warm_policy.shipped_policy() is not None and warm_policy.shipped_policy().folder == folder
    assert warmstart.shipped_for(_cfg()) is not None
    assert warmstart.shipped_for(_cfg("warm_start.start_from=scratch")) is None
    assert warmstart.shipped_for(_cfg("model=tiny-qwen-tok")) is None
    # a rebuilt shipped policy is another start: the cache key changes with its weights
    key = warmstart.cache_key(_cfg())
    record = json.loads((folder / "build.json").read_text())
    (folder / "build.json").write_text(json.dumps({**record, "weights_sha256": "0" * 64}))
    assert warmstart.cache_key(_cfg()) != key


def test_the_policy_that_measured_the_run_best_is_preferred_to_the_general_one(monkeypatch, built, tmp_path):
    import shutil

    general = _shipped_with_rate(monkeypatch, built, tmp_path, 0.5)  # measured below the gate
    special = tmp_path / "warm" / "corridor"
    shutil.copytree(general, special)
    record = json.loads((special / "build.json").read_text())
    record["targets"][0]["valid_rate"] = 0.95
    (special / "build.json").write_text(json.dumps(record))
    assert [p.folder.name for p in warm_policy.shipped_policies()] == [warm_policy.GENERAL, "corridor"]
    assert warm_policy.policy_for(_cfg()).folder == special  # it measured these settings best
    # nobody measured these settings: the policy that measured this env best under others (the run checks it)
    assert warm_policy.policy_for(_cfg("env_config.length=9")).folder == special
    assert warm_policy.policy_for(_cfg("warm_start.target_valid_rate=0.99")).folder == special  # still the best start
    record["targets"][0]["env"] = "some-other-env"  # no policy measured this env at all: the general one
    (special / "build.json").write_text(json.dumps(record))
    assert warm_policy.policy_for(_cfg("env_config.length=9")).folder == general
    shutil.rmtree(general)
    assert warm_policy.policy_for(_cfg("env_config.length=9")) is None


def test_every_shipped_target_keeps_its_check_key_and_an_explicit_default_finds_it():
    """The check key leaves out env settings equal to the env's defaults; every measurement the
    shipped builds recorded must still be found by the settings it was measured on."""
    from ragen_core.trainer.warmstart import payload_digest

    policies = warm_policy.shipped_policies()
    assert policies
    for policy in policies:
        for entry in policy.record["targets"]:
            check = entry["check"]
            cfg = RunConfig.model_validate({"env": check["env"], "preset": check["preset"], "env_config": check["env_config"]})
            assert payload_digest({**check, "env_config": warm_policy.changed_env_settings(cfg)}) == entry["check_key"], entry["label"]
    from ragen_core import registry

    if "webshop" not in registry.names("env"):
        pytest.skip("ragen-env-webshop is not installed")
    webshop = load_config(RunConfig, [], ["env=webshop", "env_config.show_guidance=true"])  # the default, spelled out
    assert warm_policy.policy_for(webshop).folder.name == "webshop" and warm_policy.policy_for(webshop).target(webshop) is not None


def test_the_shipped_policies_write_valid_replies_for_every_env_they_were_built_for():
    """The policies in this repository, on each installed env they target, greedy, a few episodes.

    The build measured every target at its training temperature on 32 episodes (>= its gate, see
    ``ragen warm-policy show``); here 3 greedy episodes of at most 2 turns per target must be
    >= 0.75 valid: greedy decoding removes the sampling noise, and 0.75 leaves room for one bad
    reply in four turns, since floats (and so near-tied greedy choices) differ between machines.
    """
    from ragen_core import registry
    from ragen_core.models import load_model_and_tokenizer

    policies = warm_policy.shipped_policies()
    assert policies, f"no shipped warm policy under {warm_policy.SHIPPED_ROOT} (ragen warm-policy build)"
    installed = set(registry.names("env"))
    checked = 0
    for policy, target in ((p, t) for p in policies for t in p.record["targets"]):
        if target["env"] not in installed or not warm_policy.used_as_is(target, target["target_valid_rate"]):
            continue  # runs check the others on their own seeds first
        label = target["label"]
        base = registry.get_spec("env", target["env"]).recipe(label.split("/", 1)[1]) if "/" in label else None
        cfg = load_config(RunConfig, [], [f"env={target['env']}"], base=base)
        assert warm_policy.check_key(cfg) == target["check_key"], f"{label}: its settings changed since the build; rebuild the policy"
        greedy = cfg.sampling.train.model_copy(update={"do_sample": False, "temperature": 0.0})
        cfg = cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"train": greedy})})
        short = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"max_turns": 2})})
        model, tok = load_model_and_tokenizer("tiny")
        policy.load_into(model)
        try:
            rate = warmstart.format_check(short, model, tok, episodes=3).valid_rate
        except RagenError:  # an env whose config refuses two turns (sudoku's budget check) plays its own
            rate = warmstart.format_check(cfg, model, tok, episodes=3).valid_rate
        assert rate >= 0.75, f"{label}: shipped policy {policy.folder.name} wrote {rate:.2f} valid replies"
        checked += 1
    assert checked >= 1


def test_the_gate_counts_well_formed_actions_where_the_env_reports_them():
    assert warmstart.well_formed({}) is True
    assert warmstart.well_formed({"action_is_valid": False}) is False
    assert warmstart.well_formed({"action_is_valid": False, "action_is_well_formed": True}) is True  # a legal-looking move that clashes
    assert warmstart.well_formed({"action_is_valid": True, "action_is_well_formed": False}) is False


def test_the_readme_names_the_shipped_chains_built_from_uncommitted_changes():
    """The README says which shipped policies' records name a commit with uncommitted changes
    (``+dirty``): that list follows the committed build records."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    said = re.search(r"some steps of the (.*?) chains ran\s+from a working tree", readme, re.S)
    assert said is not None, "the README's sentence on +dirty build records is gone"
    named = set(re.findall(r"`([\w-]+)`", said.group(1)))
    dirty = {folder.name for folder in warm_policy.SHIPPED_ROOT.iterdir()
             if (folder / "build.json").is_file() and "+dirty" in (folder / "build.json").read_text(encoding="utf-8")}
    assert named == dirty


def test_a_build_ends_saying_where_the_policy_went(tmp_path, capsys):
    """The folder was named only on the build's first line, minutes of round lines before its end."""
    from ragen_core.cli.main import main
    from ragen_core.errors import shell_word

    env = register_toy_env()
    out = tmp_path / "my policy"
    assert main(["warm-policy", "build", "--out", str(out), "--envs", env, "--episodes", "4", "--demo-turns", "1", "--epochs", "1",
                 "--max-rounds", "1", "--check-episodes", "2", "--no-recipes"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"wrote the warm policy to {out} (ragen eval --model {shell_word(str(out))} --env {env} plays it)"
    assert (out / warm_policy.BUILD_FILE).is_file()


def test_a_build_without_out_does_not_write_over_a_shipped_policy(capsys):
    """The README's rebuild commands had no --out: run by a user, they wrote over the shipped,
    git-tracked policy in the package."""
    from ragen_core.cli.main import main
    from ragen_core.trainer.warm_policy import BUILD_FILE, SHIPPED_ROOT

    shipped = SHIPPED_ROOT / "bandit"
    before = (shipped / BUILD_FILE).read_bytes()
    assert main(["warm-policy", "build", "--name", "bandit", "--envs", "bandit"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"ConfigError: {shipped} holds the shipped 'bandit' policy: a build without --out would write over it",
                   "hint: pass --out FOLDER for a policy of your own, or --replace to rebuild the shipped one"]
    assert (shipped / BUILD_FILE).read_bytes() == before
