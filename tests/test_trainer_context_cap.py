"""The context cap versus the model's positions: shrink the default, refuse an explicit overshoot."""

from __future__ import annotations

import pytest

from ragen_core.config import load_config
from ragen_core.errors import ResourceError
from ragen_core.models import load_model_and_tokenizer
from ragen_core.testing.toy_env import register_toy_env
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.setup import preflight, rollout_config


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    model, tok = load_model_and_tokenizer("tiny", cache_dir=tmp_path_factory.mktemp("tiny"))
    model.config.max_position_embeddings = 1024  # pretend the model attends over 1024 positions only
    return model, tok


def _config(*overrides: str) -> RunConfig:
    return load_config(RunConfig, [], [f"env={register_toy_env()}", "warm_start.enabled=false", *overrides])


def test_default_cap_is_the_spec_value():
    assert RunConfig().rollout.max_model_len == 3600


def test_default_cap_shrinks_to_the_model_positions(short_model):
    cfg = _config()
    preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert cfg.rollout.max_model_len == 1024
    assert rollout_config(cfg).max_model_len == 1024


def test_explicit_cap_beyond_the_model_positions_is_refused(short_model):
    cfg = _config("rollout.max_model_len=2048")
    with pytest.raises(ResourceError, match="longer than the model's 1024 positions"):
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")


def test_explicit_cap_within_the_model_positions_is_kept(short_model):
    cfg = _config("rollout.max_model_len=900")
    preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert cfg.rollout.max_model_len == 900


def test_an_observation_longer_than_the_context_is_blamed_on_the_env(short_model, capfd):
    """A 2000-cell corridor: the hint said to lower max_new_tokens (no help), and transformers printed
    "Token indices sequence length is longer than the specified maximum" before the error."""
    cfg = _config("rollout.max_model_len=600", "env_config.length=2000")
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.message.startswith(f"the first prompt of env {cfg.env!r} needs ~")
    assert err.value.hints == [f"the instruction and first observation of env {cfg.env!r} alone take ~{err.value.message.split('~')[1].split()[0]} "
                               "tokens: make them shorter (its env_config, or the env's render) or raise rollout.max_model_len"]
    assert "Token indices sequence length" not in capfd.readouterr().err
    cfg = _config("rollout.max_model_len=600", "env_config.length=300", "sampling.train.max_new_tokens=300")  # the reply is what does not fit
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.hints == ["raise rollout.max_model_len or lower sampling.train.max_new_tokens"]


def test_a_prompt_beyond_the_shrunk_cap_names_the_model_positions_not_the_setting(short_model):
    """Left at its default, the cap shrank to the model's 1024 positions, and the error then said to
    raise rollout.max_model_len, which the check above refuses: the model is what limits it."""
    cfg = _config("env_config.length=1500")  # the corridor alone overflows 1024 positions
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.message.endswith("more than the model's 1024 positions (its max_position_embeddings; "
                                      "rollout.max_model_len was lowered to it)")
    assert err.value.hints[0].endswith("or use a model with more positions (max_position_embeddings)")
    assert "raise rollout.max_model_len" not in " ".join(err.value.hints)
    cfg = _config("env_config.length=700", "sampling.train.max_new_tokens=400")  # the reply is what does not fit
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.hints == ["use a model with more positions (max_position_embeddings) or lower sampling.train.max_new_tokens"]


@pytest.mark.parametrize(("which", "other"), [("val", "train"), ("train", "val")])
def test_the_hint_names_the_larger_reply_budget(which, other, short_model):
    """The budget checked is the larger of the train and val max_new_tokens; the hint always said to lower the
    train one, which with a larger val budget changed nothing."""
    cfg = _config("rollout.max_model_len=400", f"sampling.{which}.max_new_tokens=390", f"sampling.{other}.max_new_tokens=50")
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.message.startswith("the first prompt of env") and "plus max_new_tokens=390" in err.value.message
    assert err.value.hints == [f"raise rollout.max_model_len or lower sampling.{which}.max_new_tokens"]


def test_tied_reply_budgets_are_both_named(short_model):
    """With train and val max_new_tokens equal (their defaults are), the hint said to lower the train one:
    the budget is the larger of the two, so that alone changed nothing and the next try was refused again."""
    cfg = _config("rollout.max_model_len=400", "sampling.train.max_new_tokens=390", "sampling.val.max_new_tokens=390")
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert err.value.hints == ["raise rollout.max_model_len or lower sampling.train.max_new_tokens and sampling.val.max_new_tokens"]


def test_an_enforced_env_budget_leaves_the_prompt_the_rest_of_the_context(short_model):
    """With rollout.enforce_env_max_tokens, replies stop at the env's max_tokens: the first prompt
    needs room for that many tokens only, and a prompt that does not fit names that setting."""
    fits = ("rollout.max_model_len=600", "env_config.length=300", "sampling.train.max_new_tokens=300", "sampling.val.max_new_tokens=300")
    with pytest.raises(ResourceError):  # the global budget of 300 leaves too little room: refused as before
        preflight(_config(*fits), *short_model, needs_critic=False, needs_ref=False, device="cpu")
    preflight(_config(*fits, "rollout.enforce_env_max_tokens=true", "env_config.max_tokens=50"), *short_model,
              needs_critic=False, needs_ref=False, device="cpu")
    cfg = _config(*fits, "rollout.enforce_env_max_tokens=true", "env_config.max_tokens=290")
    with pytest.raises(ResourceError) as err:
        preflight(cfg, *short_model, needs_critic=False, needs_ref=False, device="cpu")
    assert "plus max_tokens=290, more than rollout.max_model_len=600" in err.value.message
    assert err.value.hints == ["raise rollout.max_model_len or lower env_config.max_tokens"]
