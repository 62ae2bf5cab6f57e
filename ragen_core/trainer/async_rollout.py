"""Async rollout (``rollout.async_rollout: true``): step t+1's rollout runs while step t updates.

One step off-policy, corrected by the PPO importance ratio against the *behaviour* policy::

    step t:  take()  -> episodes of step t + their behaviour log-probs   (made during step t-1)
             start() -> behaviour copy <- current weights (version v); step t+1's rollout
                        starts in a background thread on that copy
             select, prepare, update  -> the trainer's weights become version v+1
    step t+1: take() -> episodes sampled by version v, trained by version v+1

The engine samples from a **behaviour copy** of the policy (a frozen deep copy; twice the weight
memory), so the update can change the trainer's weights while the rollout runs. The background
job does the rollout, builds the batch and computes the old log-probs on that same copy before
anything syncs it again: the old log-probs are exactly those of the weights that sampled the
episode, and the PPO ratio ``pi_theta / pi_old`` corrects for the one-version lag (it is 1 up to
float rounding when the versions agree, on the first step). Every reply records the version that
sampled it (``Turn.policy_version``); the step logs ``rollout/policy_lag`` (trainer version minus
the episodes' version: 0 on the first step, then 1).

The first step has nothing in flight and rolls out in the foreground. Before validation (same env
pool, same engine) the job is joined and the copy synced to the newest weights, so validation
measures the current policy; the joined episodes and their log-probs stay valid, being computed
before that sync. A checkpoint written while a rollout is in flight (or done but not yet trained
on) does not contain it: it saves the runner's seed counter from before that rollout
(:attr:`AsyncRollout.unplayed_state`), so a resumed run plays the same seeds again, with the
checkpoint's weights.

Hooks other than ``ragen_on_rollout_end`` run while the next rollout is in flight: an observer
that generates with ``context.engine`` would share the engine with it (none of ours does).
Not combined with several ranks or the gradient analysis (refused when the run starts).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ragen_core.trainer.batch import TrainBatch


class PolicyCopy:
    """A frozen deep copy of the policy that the engine samples from, re-loaded after updates.

    Used by async rollout (the trainer's weights change while the copy samples) and by FSDP
    (:mod:`ragen_core.trainer.distributed`: the trainer's weights are sharded, the engine needs
    them whole). :meth:`sync` loads a full state dict and hands the copy's weights to the engine.
    """

    def __init__(self, model: Any) -> None:
        self.model = copy.deepcopy(model).requires_grad_(False).eval()
        self.version = 0
        """Policy version of :attr:`model`."""

    def sync(self, state_dict: Any, version: int, engine: Any) -> None:
        """Load ``state_dict`` (full, unsharded weights of policy ``version``) and sync the engine to it."""
        import torch

        with torch.no_grad():
            self.model.load_state_dict(state_dict)
        self.version = int(version)
        engine.sync_weights(self.model.state_dict(), version=self.version)  # an in-process engine shares the copy: no copy


#: Seconds :meth:`AsyncRollout.close` gives the rollout a step stopped waiting for (a second Ctrl-C)
#: to end before it counts as left behind (one in a healthy env ends as its pool closes; it was
#: reported as stuck in a call it was about to leave).
ABANDONED_GRACE_S = 2.0


class AsyncRollout:
    """The behaviour copy, and the rollout in flight (at most one).

    Args:
        model: The trainer's policy; copied once as the behaviour policy the engine samples.
        collect: ``collect(behaviour_model) -> (trajectories, batch)``: one training rollout and
            its batch with ``old_log_probs`` set from ``behaviour_model`` (runs in the background).
        runner_state: Returns the training runner's checkpoint state (its seed counter).
    """

    def __init__(self, model: Any, collect: Callable[[Any], tuple[list[Any], TrainBatch]], runner_state: Callable[[], Any]) -> None:
        self.copy = PolicyCopy(model)
        """The weights the engine samples from: the trainer's weights as of the last :meth:`start`."""
        self.collect = collect
        self.runner_state = runner_state
        self.unplayed_state: Any = None
        """The runner's state from before the rollout started and not yet taken (None: none such):
        what a checkpoint saves, so a resume plays that rollout's seeds again."""
        self._pending: Future[tuple[list[Any], TrainBatch]] | None = None
        self._abandoned: Future[tuple[list[Any], TrainBatch]] | None = None
        """The rollout :meth:`take` was waiting for when it was interrupted (a second Ctrl-C / SIGTERM)."""

    @property
    def behaviour(self) -> Any:
        """The behaviour policy (:attr:`copy`'s model)."""
        return self.copy.model

    @property
    def version(self) -> int:
        """Policy version of :attr:`behaviour`."""
        return self.copy.version

    def take(self) -> tuple[list[Any], TrainBatch]:
        """This step's episodes and batch: the rollout in flight, or one made now (nothing in flight)."""
        pending, self._pending = self._pending, None
        self.unplayed_state = None
        if pending is None:
            return self.collect(self.behaviour)
        try:
            return pending.result()
        except BaseException:
            if not pending.done():  # interrupted while waiting: the rollout's thread goes on
                self._abandoned = pending
            raise

    def start(self, model: Any, version: int, engine: Any) -> None:
        """Copy ``model``'s weights (policy ``version``) into the behaviour copy and start the next rollout."""
        self.sync(model, version, engine)
        self.unplayed_state = self.runner_state()
        pending: Future[tuple[list[Any], TrainBatch]] = Future()
        behaviour = self.behaviour

        def job() -> None:
            try:
                pending.set_result(self.collect(behaviour))
            except BaseException as exc:  # noqa: BLE001 - handed to take(), which raises it
                pending.set_exception(exc)

        # a daemon thread, not an executor's: an env that never returns must not keep the process from exiting
        threading.Thread(target=job, name="ragen-rollout", daemon=True).start()
        self._pending = pending

    @property
    def in_flight(self) -> bool:
        """A rollout was started and not yet taken (it may have finished)."""
        return self._pending is not None

    def sync(self, model: Any, version: int, engine: Any) -> None:
        """Behaviour copy <- ``model``'s weights as policy ``version`` (waits for a rollout in flight first)."""
        self.wait()
        self.copy.sync(model.state_dict(), version, engine)

    def wait(self) -> None:
        """Let a rollout in flight finish (its result is kept for the next :meth:`take`)."""
        if self._pending is not None:
            self._pending.exception()  # waits; an error is raised by take()

    @property
    def abandoned(self) -> bool:
        """:meth:`take` was interrupted while waiting for a rollout, and it has not ended since."""
        return self._abandoned is not None and not self._abandoned.done()

    def close(self, timeout_s: float | None = None) -> bool:
        """Drop a rollout in flight after waiting for it, at most ``timeout_s`` seconds (None: as
        long as it takes); one :meth:`take` stopped waiting for is given :data:`ABANDONED_GRACE_S`. Idempotent.
        False when it had not ended by then: its thread is left behind (a daemon thread, so it
        does not keep the process from exiting; stuck in an env that does not return)."""
        pending, self._pending = self._pending, None
        abandoned, self._abandoned = self._abandoned, None
        if pending is not None:
            try:
                pending.exception(timeout=timeout_s)
            except FutureTimeout:
                return False
        if abandoned is not None:  # a healthy rollout ends soon after its env pool closed: not left behind
            try:
                abandoned.exception(timeout=ABANDONED_GRACE_S if timeout_s is None else min(timeout_s, ABANDONED_GRACE_S))
            except FutureTimeout:
                return False
        return True


def policy_lag(trajectories: list[Any], version: int) -> float:
    """Mean over replies of ``version`` minus the policy version that sampled the reply (0 without replies)."""
    lags = [version - turn.policy_version for t in trajectories for turn in t.turns]
    return sum(lags) / len(lags) if lags else 0.0
