"""Forward passes the trainer needs: token log-probs/entropies of the policy, and the critic.

The critic is a **separate copy of the language model's trunk with a scalar value head** (a
``Linear(hidden, 1)`` on the last hidden state), as in the reference (spec 8.7: a value head on
the same LM architecture, initialised from the same weights). It has its own AdamW optimiser and
learning rate, so value regression never disturbs the policy's weights. It is built only when the
algorithm needs it (GAE / PPO).

Given the response mask, rows that share their ids up to the first trained token (a GRPO group's
prompt) run that prompt once: within a micro-batch (:mod:`ragen_core.trainer.prefix`) and, with a
:class:`~ragen_core.trainer.prefix_session.PrefixSession`, across the micro-batches of a
mini-batch. Results and gradients equal the full forward's up to float rounding; positions
before a row's first trained token are then 0 (nothing reads them: losses, KL, entropy and GAE
all use the response mask). ``ragen_core.trainer.prefix.ENABLED = False`` forces the full forward.
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
    response_mask: torch.Tensor | None = None,
    session: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every next token and (optionally) the full-vocabulary entropy.

    Returns tensors shaped ``[B, L-1]``: position ``t`` scores token ``t+1`` given tokens
    ``<= t``. Logits are divided by ``temperature`` (spec 7.4) unless it is 0 (greedy).

    With ``response_mask`` (``[B, L-1]``, 1 on trained positions) rows that share the ids before
    their first trained position run that prefix once (:mod:`ragen_core.trainer.prefix`); the
    values from each row's first trained position on are the same (up to float rounding) and
    positions before it are 0. Without it, or when nothing is shared, every row runs in full.
    A :class:`ragen_core.trainer.prefix_session.PrefixSession` (``session``) shares prompts
    across micro-batches too (follow its backward/finish protocol).
    """
    from ragen_core.trainer import prefix

    found = prefix.shared_forward(model, input_ids, attention_mask, response_mask, session)
    if found is not None:
        logits, ids_s, plan = found
        targets = ids_s.roll(-1, dims=1)
        logp, entropy = _logp_entropy(logits, targets, temperature, with_entropy)
        return prefix.to_shifted(logp, plan), (prefix.to_shifted(entropy, plan) if entropy is not None else None)
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    return _logp_entropy(out.logits[:, :-1, :], input_ids[:, 1:], temperature, with_entropy)


def _logp_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-position log-prob of ``targets`` ``[B, T]`` under ``logits`` ``[B, T, V]`` (and entropy)."""
    import torch

    from ragen_core.trainer.losses import entropy_from_logits

    logits = logits.float()
    if temperature and temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logp, entropy


def batched_logprobs(model: Any, batch: Any, rows: list[int], micro: int, temperature: float, with_entropy: bool = False) -> tuple[Any, Any]:
    """No-grad :func:`token_logprobs` over ``rows`` of a :class:`TrainBatch`, in micro-batches.

    Uses the batch's response mask, so each shared prompt runs once per pass; values before a
    row's first trained position are then 0 (every consumer masks with the response mask).
    """
    import torch

    from ragen_core.trainer.prefix_session import PrefixSession

    n, width = batch.input_ids.shape[0], batch.input_ids.shape[1] - 1
    logp = torch.zeros((n, width), dtype=torch.float32)
    ent = torch.zeros((n, width), dtype=torch.float32) if with_entropy else None
    device = next(model.parameters()).device
    with torch.no_grad():
        session = PrefixSession.create(model, batch.input_ids[rows], batch.attention_mask[rows], batch.response_mask[rows])
        for start in range(0, len(rows), micro):
            idx = rows[start : start + micro]
            ids = batch.input_ids[idx].to(device)
            am = batch.attention_mask[idx].to(device)
            rm = batch.response_mask[idx].to(device)
            lp, e = token_logprobs(model, ids, am, temperature=temperature, with_entropy=with_entropy, response_mask=rm, session=session)
            logp[idx] = lp.cpu()
            if ent is not None and e is not None:
                ent[idx] = e.cpu()
    return logp, ent


def float32_if_half(model: Any) -> bool:
    """Make ``model`` float32 when it holds float16 weights (an AdamW step on them overflows to NaN);
    True when it did. bfloat16 stays as it is."""
    import torch

    if not any(p.dtype == torch.float16 for p in model.parameters()):
        return False
    model.float()
    return True


def build_critic(policy: Any, *, float32: bool = False) -> Any:
    """A value model: a deep copy of ``policy`` plus a zero-initialised ``Linear(hidden, 1)``.

    Its weights are float32 when the policy's are float16 (an AdamW step on them overflows), and
    also when they are bfloat16 with ``float32`` (``optim.float32_weights``; a LoRA policy keeps its
    half base frozen, while the critic trains every weight)."""
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
            # the critic reads hidden states only: skip the vocabulary projection where the model allows
            from ragen_core.trainer.prefix import keep_one_logit

            self._keep = keep_one_logit(lm)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor | None = None,
                    session: Any = None) -> torch.Tensor:
            """``[B, L-1]`` values; with ``response_mask`` shared prompts run once (0 before a row's
            first trained position); ``session`` as in :func:`token_logprobs` (built on ``self.lm``)."""
            from ragen_core.trainer import prefix

            found = prefix.shared_forward(self.lm, input_ids, attention_mask, response_mask, session, hidden=True)
            if found is not None:
                hidden, _, plan = found
                return prefix.to_shifted(self.head(hidden.float()).squeeze(-1), plan)
            out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False, **self._keep)
            hidden = out.hidden_states[-1].float()
            # value of the state *before* predicting token t+1 lives at position t (shifted arrays)
            values: torch.Tensor = self.head(hidden).squeeze(-1)[:, :-1]
            return values

    lm = copy.deepcopy(policy)
    if not float32_if_half(lm) and float32 and any(p.dtype == torch.bfloat16 for p in lm.parameters()):
        lm.float()
    lm.requires_grad_(True)
    return ValueModel(lm)


def batched_values(critic: Any, batch: Any, rows: list[int], micro: int) -> Any:
    """No-grad critic values ``[B, L-1]`` for ``rows`` of a batch (0 before a row's first trained position)."""
    import torch

    from ragen_core.trainer.prefix_session import PrefixSession

    n, width = batch.input_ids.shape[0], batch.input_ids.shape[1] - 1
    values = torch.zeros((n, width), dtype=torch.float32)
    device = next(critic.parameters()).device
    with torch.no_grad():
        session = PrefixSession.create(critic.lm, batch.input_ids[rows], batch.attention_mask[rows], batch.response_mask[rows])
        for start in range(0, len(rows), micro):
            idx = rows[start : start + micro]
            v = critic(batch.input_ids[idx].to(device), batch.attention_mask[idx].to(device), response_mask=batch.response_mask[idx].to(device),
                       session=session)
            values[idx] = v.float().cpu()
    return values


def count_parameters(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))
