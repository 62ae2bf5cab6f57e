"""Forward passes the trainer needs: token log-probs/entropies of the policy, and the critic.

The critic is a **separate copy of the language model's trunk with a scalar value head** (a
``Linear(hidden, 1)`` on the last hidden state), as in the reference (spec 8.7: a value head on
the same LM architecture, initialised from the same weights). It has its own AdamW optimiser and
learning rate, so value regression never disturbs the policy's weights. It is built only when the
algorithm needs it (GAE / PPO).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every next token and (optionally) the full-vocabulary entropy.

    Returns tensors shaped ``[B, L-1]``: position ``t`` scores token ``t+1`` given tokens
    ``<= t``. Logits are divided by ``temperature`` (spec 7.4) unless it is 0 (greedy).
    """
    import torch

    from ragen_core.trainer.losses import entropy_from_logits

    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    logits = out.logits[:, :-1, :].float()
    if temperature and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)
    logp = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logp, entropy


def batched_logprobs(model: Any, batch: Any, rows: list[int], micro: int, temperature: float, with_entropy: bool = False) -> tuple[Any, Any]:
    """No-grad :func:`token_logprobs` over ``rows`` of a :class:`TrainBatch`, in micro-batches."""
    import torch

    n, width = batch.input_ids.shape[0], batch.input_ids.shape[1] - 1
    logp = torch.zeros((n, width), dtype=torch.float32)
    ent = torch.zeros((n, width), dtype=torch.float32) if with_entropy else None
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(rows), micro):
            idx = rows[start : start + micro]
            ids = batch.input_ids[idx].to(device)
            am = batch.attention_mask[idx].to(device)
            lp, e = token_logprobs(model, ids, am, temperature=temperature, with_entropy=with_entropy)
            logp[idx] = lp.cpu()
            if ent is not None and e is not None:
                ent[idx] = e.cpu()
    return logp, ent


def build_critic(policy: Any) -> Any:
    """A value model: a deep copy of ``policy`` plus a zero-initialised ``Linear(hidden, 1)``."""
    import copy

    import torch

    class ValueModel(torch.nn.Module):
        def __init__(self, lm: Any) -> None:
            super().__init__()
            self.lm = lm
            hidden = int(getattr(lm.config, "hidden_size", 0) or lm.get_input_embeddings().embedding_dim)
            self.head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
            hidden = out.hidden_states[-1].float()
            # value of the state *before* predicting token t+1 lives at position t (shifted arrays)
            return self.head(hidden).squeeze(-1)[:, :-1]

    lm = copy.deepcopy(policy)
    lm.requires_grad_(True)
    return ValueModel(lm)


def batched_values(critic: Any, batch: Any, rows: list[int], micro: int) -> Any:
    """No-grad critic values ``[B, L-1]`` for ``rows`` of a batch."""
    import torch

    n, width = batch.input_ids.shape[0], batch.input_ids.shape[1] - 1
    values = torch.zeros((n, width), dtype=torch.float32)
    device = next(critic.parameters()).device
    with torch.no_grad():
        for start in range(0, len(rows), micro):
            idx = rows[start : start + micro]
            v = critic(batch.input_ids[idx].to(device), batch.attention_mask[idx].to(device))
            values[idx] = v.float().cpu()
    return values


def count_parameters(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))
