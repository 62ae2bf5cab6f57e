"""Empty-after-filter bookkeeping for the trainer (spec 9.6 and 12.1).

The filter itself never stops training; the trainer feeds every :class:`FilterResult` into an
:class:`EmptyStreak` and stops when :meth:`EmptyStreak.update` returns True.
"""

from __future__ import annotations

from ragen_core.interfaces.rollout_filter import FilterConfig, FilterResult


class EmptyStreak:
    """Counts consecutive steps whose filter kept no group.

    Args:
        stop_after: Stop once this many consecutive steps were empty; 0 disables stopping
            (``FilterConfig.empty_stop_steps``, default 5).
        count_all_zero: When False, an empty step whose groups *all* scored zero (metric
            ``rollout/filter_zero_count`` equal to ``rollout/filter_num_groups``) neither counts
            nor resets the streak (spec 17.2 L16: signal-free batches need not end a run).
    """

    def __init__(self, stop_after: int = 5, *, count_all_zero: bool = True) -> None:
        if stop_after < 0:
            raise ValueError(f"stop_after must be >= 0, got {stop_after}")
        self.stop_after = stop_after
        self.count_all_zero = count_all_zero
        self.count = 0
        self.last_empty = False

    @classmethod
    def from_config(cls, config: FilterConfig, *, count_all_zero: bool = True) -> EmptyStreak:
        """Build from a filter config's ``empty_stop_steps``."""
        return cls(config.empty_stop_steps, count_all_zero=count_all_zero)

    def update(self, result: FilterResult) -> bool:
        """Record one step's result; return True when training should stop now.

        A non-empty step resets the counter to 0.
        """
        self.last_empty = result.empty
        if not result.empty:
            self.count = 0
        elif self.count_all_zero or not _all_zero(result):
            self.count += 1
        return self.should_stop

    @property
    def should_stop(self) -> bool:
        """True once the streak reached ``stop_after`` (never when ``stop_after`` is 0)."""
        return self.stop_after > 0 and self.count >= self.stop_after

    def reset(self) -> None:
        """Forget the streak (e.g. after resuming from a checkpoint with a new filter)."""
        self.count = 0
        self.last_empty = False

    def metrics(self) -> dict[str, float]:
        """``rollout/empty_after_filter`` and ``rollout/consecutive_empty_after_filter_steps``."""
        return {
            "rollout/empty_after_filter": 1.0 if self.last_empty else 0.0,
            "rollout/consecutive_empty_after_filter_steps": float(self.count),
        }


def _all_zero(result: FilterResult) -> bool:
    groups = result.metrics.get("rollout/filter_num_groups", 0.0)
    return groups > 0 and result.metrics.get("rollout/filter_zero_count", -1.0) == groups
