"""Per-step episode metrics (spec 4.5, 14.2, 18.6) and the early-stopping rules (spec 12).

Episode metrics are computed from :class:`~ragen_core.rollout.types.Trajectory` records and
prefixed ``train/<tag>/...`` or ``val-env/<tag>/...``:

* ``success`` — fraction of episodes with ``success``;
* ``pass@<G>`` — fraction of groups (G = members) with at least one success;
* ``num_actions`` — executed actions per episode;
* ``action_is_valid`` — fraction of turns whose reply parsed and named only known actions;
* ``format_penalty`` — mean penalty per episode; ``episodic_return`` — mean env reward;
* ``reward`` — mean training score (env reward + penalty); ``num_turns``;
* ``info/<key>`` — for each info key the env declares in ``info_metrics``: the mean, over the
  episodes that reported the key, of each episode's aggregate (``Trajectory.info_metrics``);
  nothing for a key no episode reported;
* ``env_timeouts`` / ``env_failures`` (overall only) — episodes the env pool ended because a step
  took longer than its ``step_timeout_s`` / because its worker crashed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ragen_core.rollout.types import Trajectory


def episode_metrics(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Aggregate metrics of one rollout, per tag and overall (``<prefix>/reward``, ``/success``)."""
    out: dict[str, float] = {}
    if not trajectories:
        return out
    by_tag: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_tag[t.tag].append(t)
    for tag, trajs in by_tag.items():
        n = len(trajs)
        groups: dict[int, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            groups[t.group_id].append(t)
        size = max(len(g) for g in groups.values())
        turns = [turn for t in trajs for turn in t.turns]
        base = f"{prefix}/{tag}"
        out[f"{base}/success"] = sum(t.success for t in trajs) / n
        out[f"{base}/pass@{size}"] = sum(any(t.success for t in g) for g in groups.values()) / len(groups)
        out[f"{base}/num_actions"] = sum(t.num_actions for t in trajs) / n
        out[f"{base}/num_turns"] = sum(len(t.turns) for t in trajs) / n
        out[f"{base}/action_is_valid"] = (sum(turn.valid for turn in turns) / len(turns)) if turns else 0.0
        out[f"{base}/episodic_return"] = sum(t.env_reward for t in trajs) / n
        out[f"{base}/format_penalty"] = sum(t.penalty for t in trajs) / n
        out.update({f"{base}/{key}": value for key, value in info_means(t.info_metrics for t in trajs).items()})
    n_all = len(trajectories)
    out[f"{prefix}/reward"] = sum(t.total_reward for t in trajectories) / n_all
    out[f"{prefix}/success"] = sum(t.success for t in trajectories) / n_all
    out[f"{prefix}/response_length"] = sum(t.num_generated_tokens for t in trajectories) / n_all
    out[f"{prefix}/env_timeouts"] = float(sum(t.end_reason == "timeout" for t in trajectories))
    out[f"{prefix}/env_failures"] = float(sum(t.end_reason == "failed" for t in trajectories))
    return out


def info_means(episodes: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """``info/<key>`` for each info metric the env declares (``Env.info_metrics``): the mean over the
    ``episodes`` that reported it (each one's ``Trajectory.info_metrics``) of each one's value; what a
    run logs as ``<prefix>/<tag>/info/<key>``, ``ragen eval`` and ``ragen env play`` print."""
    reported: dict[str, list[float]] = {}
    for episode in episodes:
        for key, value in episode.items():
            reported.setdefault(key, []).append(float(value))
    return {f"info/{key}": sum(values) / len(values) for key, values in sorted(reported.items())}


class EarlyStopper:
    """The early-stopping rules of spec 12 and the line that explains each stop: 1, ``empty_stop_steps``
    steps in a row with nothing to train (the trainer counts the streak: it is logged and
    checkpointed with the step); 2, the in-group reward std collapsing; 3, validation success
    staying near 0.

    State is a plain dict so it can be checkpointed.
    """

    def __init__(self, reward_variance: bool = True, low_val: bool = True, patience: int = 5, window: int = 10, *,
                 empty_stop_steps: int = 0) -> None:
        self.reward_variance = reward_variance
        self.low_val = low_val
        self.patience = patience
        self.window = window
        self.empty_stop_steps = empty_stop_steps
        """The filter's ``empty_stop_steps`` (0: rule 1 is off)."""
        self.rv_history: list[float] = []
        self.val_counters: dict[str, int] = {}
        self.low_keys: list[str] = []  # the success keys that tripped rule 3 (for the stop message)

    def observe_empty(self, streak: int) -> str | None:
        """Feed the number of steps in a row with nothing to train (this one included); returns a stop key or None."""
        if self.empty_stop_steps and streak >= self.empty_stop_steps:
            return "early_stopped/empty_filtered_steps"
        return None

    def observe_reward_std(self, value: float) -> str | None:
        """Feed ``rollout/in_group_reward_std`` of a non-empty step; returns a stop key or None."""
        if not self.reward_variance:
            return None
        self.rv_history.append(float(value))
        if len(self.rv_history) < 2 * self.window:
            return None
        base = sum(self.rv_history[: self.window]) / self.window
        recent = self.rv_history[-self.window :]
        if base > 0 and all(v < 0.1 * base for v in recent):
            return "early_stopped/reward_variance_collapse"
        return None

    def observe_validation(self, metrics: dict[str, float]) -> str | None:
        if not self.low_val:
            return None
        stop = None
        self.low_keys = []
        for key, value in metrics.items():
            if key.startswith("val-env/") and key.endswith("/success") and key.count("/") == 2:
                count = self.val_counters.get(key, 0) + 1 if value < 0.01 else 0
                self.val_counters[key] = count
                if count >= self.patience:
                    stop = "early_stopped/low_validation_success"
                    self.low_keys.append(key)
        return stop

    def explain(self, reason: str) -> str | None:
        """One line for a stop of these rules: what tripped it and the settings that change it (None: another stop)."""
        if reason == "early_stopped/empty_filtered_steps":
            n = self.empty_stop_steps
            return (f"no group was left to train in {n} steps in a row (filter_config.empty_stop_steps={n}); "
                    "filter_config.empty_stop_steps=0 turns this stop off")
        if reason == "early_stopped/reward_variance_collapse":
            return (f"the in-group reward std of the last {self.window} non-empty steps stayed below 0.1 x its mean over the "
                    "first ones; early_stop.reward_variance_collapse=false turns this stop off")
        if reason == "early_stopped/low_validation_success":
            keys = ", ".join(self.low_keys) or "validation success"
            return (f"{keys} stayed below 0.01 in {self.patience} validations in a row (early_stop.low_val_success_patience="
                    f"{self.patience}); set early_stop.low_val_success=false to keep training a task that starts at 0 success")
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"rv_history": list(self.rv_history), "val_counters": dict(self.val_counters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rv_history = list(state.get("rv_history", []))
        self.val_counters = dict(state.get("val_counters", {}))


def group_reward_std(scores: Sequence[float], group_ids: Sequence[int]) -> float:
    """Mean over groups of the unbiased in-group std of episode scores (0 for singletons)."""
    import statistics

    groups: dict[int, list[float]] = defaultdict(list)
    for s, g in zip(scores, group_ids):
        groups[int(g)].append(float(s))
    if not groups:
        return 0.0
    stds = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in groups.values()]
    return sum(stds) / len(stds)


def is_number(value: Any) -> bool:
    """A metric value: an int/float (not a bool) or a tensor/array scalar (has ``.item()``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) or hasattr(value, "item")
