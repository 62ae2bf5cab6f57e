"""DAPO's distinctive pieces as pure functions: dynamic sampling and soft overlong punishment.

* Dynamic sampling: a group whose (de-duplicated) episode scores are all equal has zero
  group-relative advantage everywhere and only dilutes the batch, so it is dropped. Groups with
  a single episode are kept (under the spec's μ = 0, σ = 1 rule their advantage is not zero).
  Apply it to the scores the estimator will see (after any reward shaping).
* Soft overlong punishment, with ``ℓ`` = generated tokens of the episode, ``L`` = max length,
  ``B`` = buffer length, ``f`` = penalty factor::

      p(ℓ) = 0                       if ℓ ≤ L − B
      p(ℓ) = f · ((L − B) − ℓ) / B   if L − B < ℓ ≤ L
      p(ℓ) = −f                      if ℓ > L

  The penalty is added to the reward on the row's last trained token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragen_algo_grpo.grpo import episode_scores
from ragen_core.errors import ConfigError

if TYPE_CHECKING:
    import torch


def dynamic_sampling_mask(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    episode_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[B]`` bool: True for rows to keep (their group has ≥ 2 distinct scores, or 1 episode).

    Args:
        scores: ``[B]`` episode scores (or ``[B, T]`` token rewards, summed as the estimators
            sum them: :func:`~ragen_algo_grpo.grpo.episode_scores`, so "flat" means the same
            groups here as in GRPO's ``flat_groups``).
        group_ids: ``[B]`` group keys.
        episode_ids: ``[B]`` optional; rows of one episode count once.
    """
    import torch

    s = episode_scores(scores) if scores.dim() == 2 else scores
    groups = group_ids.tolist()
    episodes = (
        episode_ids.tolist() if episode_ids is not None else list(range(len(groups)))
    )
    seen: dict[object, dict[object, float]] = {}
    for row, (g, e) in enumerate(zip(groups, episodes)):
        seen.setdefault(g, {}).setdefault(e, float(s[row]))
    keep_group = {g: len(v) < 2 or len(set(v.values())) > 1 for g, v in seen.items()}
    return torch.tensor(
        [keep_group[g] for g in groups], dtype=torch.bool, device=s.device
    )


def overlong_penalty(
    lengths: torch.Tensor, *, max_length: int, buffer_len: int, factor: float = 1.0
) -> torch.Tensor:
    """Soft overlong punishment ``p(ℓ)`` per row (formula in the module docstring).

    Raises:
        ConfigError: ``buffer_len`` not in ``(0, max_length]``.
    """
    import torch

    if not 0 < buffer_len <= max_length:
        raise ConfigError(
            f"overlong_buffer_len must be in (0, {max_length}], got {buffer_len}"
        )
    ell = lengths.to(torch.float64)
    start = float(max_length - buffer_len)
    inside = factor * (start - ell) / buffer_len
    out = torch.where(ell <= start, torch.zeros_like(ell), inside)
    out = torch.where(ell > max_length, torch.full_like(ell, -factor), out)
    return out


def apply_overlong_penalty(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    max_length: int,
    buffer_len: int,
    factor: float = 1.0,
) -> torch.Tensor:
    """New token rewards with ``p(ℓ_i)`` added on each row's last trained token.

    ``ℓ_i = Σ_t m_{i,t}``. Rows without trained tokens are unchanged. The input is not mutated.
    """
    import torch

    active = response_mask > 0
    lengths = active.sum(dim=-1)
    penalty = overlong_penalty(
        lengths, max_length=max_length, buffer_len=buffer_len, factor=factor
    )
    positions = torch.arange(active.shape[-1], device=active.device).expand_as(active)
    last = (
        torch.where(active, positions, torch.full_like(positions, -1))
        .max(dim=-1)
        .values
    )
    out = token_rewards.clone()
    rows = (last >= 0).nonzero().flatten()
    out[rows, last[rows]] += penalty[rows].to(out.dtype)
    return out
