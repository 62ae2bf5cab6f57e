"""Async rollout (``rollout.async_rollout``): one step off-policy, corrected against the behaviour policy.

Two PPO steps on the tiny model and the Bandit env, async and sync, one optimiser step per
rollout. In sync mode the old log-probs are the update's own (ratio exactly 1, ``ppo_kl`` exactly
0). In async mode step 2's episodes were sampled by policy version 0 while the trainer holds
version 1: the old log-probs must be version 0's (they match what the engine reported while
sampling) and the ratio against the trainer's policy is not 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen_core.config import load_config
from ragen_core.trainer.config import RunConfig
from ragen_core.trainer.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The old log-probs are recomputed by a training forward of the behaviour weights; the engine
# reported the sampled tokens' log-probs from its own (cached, batched) forward of the same
# weights: the same float32 maths in another order, <= 1.4 eps * (1 + |logp|) apart per token
# (test_trainer_shared_prefix.py). Byte-token log-probs of the tiny model are >= -8, so a mean
# abs difference within 64 eps * 9 ~ 7e-5 is rounding (measured 1.8e-7 to 2.4e-7); old log-probs of
# the *trainer's* policy (one Adam step of lr 1e-3 later) differ from the behaviour's by >= 0.07
# per token on average (measured ppo_kl of step 2), 1000x more.
EPS32 = 2.0**-23
LOGP_ROUNDING = 64 * EPS32 * 9
# ppo_kl is the token mean of (old - new) log-prob; on the first async step (versions equal) it
# is rounding of that same size (measured exactly 0); one version later it is a real policy change
# (measured 0.069), far above 1e-4.
REAL_CHANGE = 1e-4


def make_config(tmp_path: Path, name: str, *overrides: str) -> RunConfig:
    return load_config(RunConfig, [], [
        "env=bandit", "algo=ppo", "steps=2", "rollout.env_groups=2", "rollout.group_size=4",
        "sampling.train.max_new_tokens=10", "optim.mini_batch_size=8", "optim.micro_batch_size=4",
        "optim.lr=1e-3", "optim.critic_lr=1e-3", "warm_start.enabled=false", "test_freq=0", "save_freq=0",
        "save_rollouts=true", "progress=false", f"run_dir={tmp_path / name}", *overrides,
    ])


def _versions(run_dir: Path, step: int) -> set[int]:
    rows = [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
    return {turn["policy_version"] for row in rows for turn in row["turns"]}


def test_async_rollout_is_one_version_behind_and_corrected_against_the_behaviour_policy(tmp_path):
    import torch

    # validation after step 1 joins step 2's rollout in flight and syncs the engine to version 1 first;
    # step 2's episodes and their old log-probs (version 0) must come through unchanged
    run = Trainer(make_config(tmp_path, "async", "rollout.async_rollout=true", "save_freq=1", "test_freq=1", "val_groups=2"))
    m1, m2 = run.train()
    assert "val-env/success" in m1 and "val-env/success" in m2
    # step 1's checkpoint was written while step 2's rollout (seeds 10002-10003) was in flight: it keeps
    # the seed counter from before that rollout (2 groups played), so a resume plays those seeds again
    state = torch.load(run.run_dir / "checkpoints" / "step_1" / "trainer_state.pt", weights_only=False)
    assert state["runner"]["counter"] == 2 and state["policy_version"] == 1
    last = torch.load(run.run_dir / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    assert last["runner"]["counter"] == 4  # the last step starts no rollout: nothing in flight
    assert _versions(run.run_dir, 1) == {0} and _versions(run.run_dir, 2) == {0}  # step 2 was sampled during step 1's update
    assert run.policy_version == 2
    assert (m1["rollout/policy_lag"], m2["rollout/policy_lag"]) == (0.0, 1.0)
    for m in (m1, m2):  # old log-probs are the sampling weights' own (version 0 both times)
        assert m["rollout/engine_logprob_abs_diff"] <= LOGP_ROUNDING
    assert abs(m1["actor/ppo_kl"]) <= LOGP_ROUNDING  # in step: ratio 1 up to rounding
    assert abs(m2["actor/ppo_kl"]) > REAL_CHANGE  # one version behind: the ratio corrects a real gap
    assert m2["actor/grad_norm"] > 0


def test_sync_rollout_samples_the_current_policy_with_ratio_one(tmp_path):
    run = Trainer(make_config(tmp_path, "sync"))
    m1, m2 = run.train()
    assert _versions(run.run_dir, 1) == {0} and _versions(run.run_dir, 2) == {1}
    assert m1["rollout/policy_lag"] == m2["rollout/policy_lag"] == 0.0
    assert m1["actor/ppo_kl"] == m2["actor/ppo_kl"] == 0.0  # old log-probs from the update's own forward: exactly 1


def test_async_rollout_refuses_the_gradient_analysis(tmp_path):
    with pytest.raises(ValueError, match="rollout.async_rollout"):
        make_config(tmp_path, "bad", "rollout.async_rollout=true", "grad_analysis.every=1")


@pytest.mark.parametrize("save_freq", [0, 1])
def test_a_failed_async_step_keeps_the_last_finished_step_and_says_how_to_resume(tmp_path, capsys, monkeypatch, save_freq):
    """With an async rollout a failed step saved nothing ("no checkpoint ...: start again with
    --overwrite", three finished steps lost); and a failure whose last finished step was saved by
    save_freq printed no resume command at all."""
    from ragen_core.cli.main import main
    from ragen_core.trainer import trainer as trainer_mod
    from ragen_core.trainer.loggers import read_metrics

    real = trainer_mod.report_pool_failures

    def fail_at_step_3(step, trajs, *rest):
        if step == 3 and not rest:  # step 3's training rollout (prefetched during step 2): before any weight changes
            raise RuntimeError("the env pool broke")
        return real(step, trajs, *rest)

    cfg = make_config(tmp_path, "broken", "rollout.async_rollout=true", "steps=4", f"save_freq={save_freq}")
    monkeypatch.setattr(trainer_mod, "report_pool_failures", fail_at_step_3)
    with pytest.raises(RuntimeError, match="the env pool broke"):
        Trainer(cfg).train()
    err = capsys.readouterr().err
    resume = f"continue with 'ragen run --resume {cfg.run_dir}'"
    if save_freq == 0:
        assert f"step 3 failed: saved checkpoints/step_2, the last finished step; once the cause is fixed, {resume}" in err
    else:
        assert f"step 3 failed: checkpoints/step_2 holds the last finished step; once the cause is fixed, {resume}" in err
    assert "nothing to resume" not in err
    monkeypatch.setattr(trainer_mod, "report_pool_failures", real)
    assert main(["run", "--resume", str(cfg.run_dir)]) == 0
    assert [r["step"] for r in read_metrics(Path(cfg.run_dir) / "metrics.jsonl")] == [1, 2, 3, 4]


def _interrupted_take(finish_after_s: float | None):
    """An AsyncRollout whose rollout in flight was being waited for when a real SIGINT came (a second
    Ctrl-C); the rollout ends ``finish_after_s`` after that (None: never)."""
    import os
    import signal
    import threading

    import torch

    from ragen_core.trainer.async_rollout import AsyncRollout

    release = threading.Event()

    def collect(behaviour):
        release.wait(30)  # at the latest: a failing test must not hang the suite
        return [], None

    class Engine:
        def sync_weights(self, state, version):
            pass

    overlap = AsyncRollout(torch.nn.Linear(2, 2), collect, lambda: {})
    overlap.start(torch.nn.Linear(2, 2), 1, Engine())
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: whatever a test before left installed
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            overlap.take()
    finally:
        signal.signal(signal.SIGINT, before)
    assert overlap.abandoned
    if finish_after_s is not None:
        threading.Timer(finish_after_s, release.set).start()
    return overlap, release


def test_a_rollout_the_aborted_step_waited_for_that_ends_soon_is_not_reported_left_behind():
    """After a second Ctrl-C the rollout in a healthy env ends as its pool closes; close() said at once that it
    was left behind, stuck in the call it was about to leave. It now waits ABANDONED_GRACE_S for it."""
    import time

    from ragen_core.trainer.async_rollout import ABANDONED_GRACE_S

    overlap, _ = _interrupted_take(finish_after_s=0.3)
    assert overlap.close(timeout_s=30) is True
    overlap, release = _interrupted_take(finish_after_s=None)  # one that hangs is still left behind, after the grace only
    began = time.monotonic()
    assert overlap.close(timeout_s=30) is False
    assert ABANDONED_GRACE_S <= time.monotonic() - began < ABANDONED_GRACE_S + 5  # not the 30 s given to one in flight
    release.set()
