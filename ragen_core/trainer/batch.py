"""Trajectories -> training tensors, built from the exact sampled token ids (fixes L1, L2, L8).

One row per episode. The row's ``input_ids`` are the episode's token sequence exactly as the
engine saw and produced it (prompt ids of the first turn, the sampled reply ids, the appended
observation ids, ...), right-padded; the token layout (ids and reply spans) comes from
:func:`ragen_core.rollout.layout.episode_layout`, or :func:`~ragen_core.rollout.layout.turn_samples`
for one row per turn in windowed context modes. Per-token arrays are aligned with the *shifted* positions
used for next-token prediction: position ``t`` holds quantities about predicting token ``t+1``
(logits at ``t``), so arrays have length ``L - 1``.

* ``response_mask[i, t] = 1`` iff token ``t+1`` of row ``i`` was sampled by the model (including
  an EOS it emitted); role headers, generation prefixes and observations are never trained.
* ``token_rewards``: the episode score (env rewards + format penalties, optionally normalised) on
  the position of the episode's last generated token; with ``turn_level=True`` each turn's reward
  plus that turn's penalty sits on the turn's last generated token instead.
* ``turn_ends[i]``: shifted position of the last generated token of every turn.

No row is ever duplicated or deleted to reach a batch multiple (L8): mini-batches simply have
variable size, so padding can never enter group statistics.

Two reference quirks come back on request (the run's ``compat`` settings, spec 17 [compat]):
``build_batch(turn_start_id=...)`` builds the reference's shifted mask instead of the exact one
(L2, :func:`shifted_mask`), :func:`adjust_batch` copies or deletes random rows to reach a
batch multiple (L8, spec 7.3), and ``build_batch(chat=...)`` trains the turns' recorded messages,
rendered with the chat template and tokenised again (L1, :func:`retokenized_row`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ragen_core.rollout.layout import episode_layout, turn_samples
from ragen_core.rollout.types import Trajectory

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ragen_core.rollout.chat import ChatTokens


@dataclass
class TrainBatch:
    """Tensors of one training batch (``B`` rows, ``L`` tokens, shifted arrays ``L-1``)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    token_rewards: torch.Tensor
    group_ids: torch.Tensor
    episode_ids: torch.Tensor
    scores: torch.Tensor
    """``[B]`` episode score used for filtering and GRPO (sum of ``token_rewards``)."""
    turn_ends: list[list[int]]
    engine_logprobs: torch.Tensor | None = None
    """``[B, L-1]`` log-probs reported by the engine on sampled positions (0 elsewhere)."""
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    tags: list[str] = field(default_factory=list)
    env_rewards: torch.Tensor | None = None
    """``[B]`` float64 env reward of each row's episode: the task reward alone, before the format
    penalty and normalisation (the rewards the filter sees with ``filter_signal=env_reward``)."""

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """A new batch with the given rows (in that order); padding columns are trimmed."""
        import torch

        idx = torch.as_tensor(list(rows), dtype=torch.long)
        out: dict[str, Any] = {}
        for name in ("input_ids", "attention_mask", "response_mask", "token_rewards", "group_ids", "episode_ids", "scores",
                     "engine_logprobs", "old_log_probs", "ref_log_probs", "values", "advantages", "returns", "env_rewards"):
            value = getattr(self, name)
            out[name] = None if value is None else value.index_select(0, idx)
        out["turn_ends"] = [self.turn_ends[i] for i in idx.tolist()]
        out["tags"] = [self.tags[i] for i in idx.tolist()] if self.tags else []
        batch = replace(self, **out)
        return batch.trim()

    def trim(self) -> TrainBatch:
        """Drop trailing columns that are padding in every row."""
        if len(self) == 0:
            return self
        length = int(self.attention_mask.sum(dim=1).max())
        if length >= self.input_ids.shape[1]:
            return self
        out: dict[str, Any] = {"input_ids": self.input_ids[:, :length], "attention_mask": self.attention_mask[:, :length]}
        for name in ("response_mask", "token_rewards", "engine_logprobs", "old_log_probs", "ref_log_probs", "values", "advantages", "returns"):
            value = getattr(self, name)
            out[name] = None if value is None else value[:, : length - 1]
        return replace(self, **out)


def episode_scores(trajectories: Sequence[Trajectory], normalization: str = "identity", grouping: str = "state") -> list[float]:
    """Episode totals (env reward + format penalty), normalised per group (spec 5.9)."""
    from ragen_core.trainer.losses import normalize_scores

    raw = [t.total_reward for t in trajectories]
    if normalization == "identity" or not raw:
        return raw
    if grouping == "state":
        keys: list[Any] = [t.group_id for t in trajectories]
    elif grouping == "inductive":
        keys = [t.tag for t in trajectories]
    else:
        keys = [0] * len(trajectories)
    return [float(x) for x in normalize_scores(raw, keys, normalization).tolist()]


def per_turn_rows(runner_config: Any) -> bool:
    """True when a rollout runner's config uses a windowed context mode (``last-k``,
    ``single-turn``): later turns do not extend earlier ones, so :func:`build_batch` needs
    ``per_turn=True`` (one row per turn)."""
    return bool(runner_config.context_window != "full")


def row_count(trajectories: Sequence[Trajectory], *, per_turn: bool) -> int:
    """Rows :func:`build_batch` makes of ``trajectories``: one per episode, or one per turn."""
    return sum(len(turn_samples(t)) for t in trajectories) if per_turn else len(trajectories)


def build_batch(
    trajectories: Sequence[Trajectory],
    pad_token_id: int,
    *,
    turn_level: bool = False,
    normalization: str = "identity",
    grouping: str = "state",
    per_turn: bool = False,
    turn_start_id: int | None = None,
    chat: ChatTokens | None = None,
) -> TrainBatch:
    """Build the training tensors of a list of episodes (see the module docstring).

    Args:
        trajectories: One entry per episode, in batch order.
        pad_token_id: Id used for right padding (masked out by ``attention_mask``).
        turn_level: Place per-turn rewards on each turn's last token (no normalisation).
        normalization: Episode-score normalisation of spec 5.9 (episode mode only).
        grouping: Normalisation groups: ``state`` (group id), ``inductive`` (tag), ``batch``.
        per_turn: One row per turn (windowed context modes, spec 5.5): every row carries its
            episode's score on its reply's last token and the episode's id in ``episode_ids``,
            so group statistics count each episode once.
        turn_start_id: The chat template's turn-start token (:func:`~ragen_core.rollout.chat.turn_start_id`):
            build the reference's shifted mask (:func:`shifted_mask`, ``compat.shifted_mask``)
            instead of the exact one. The batch then has no ``engine_logprobs`` (the engine
            reports none for the tokens it did not sample).
        chat: The rollout's :class:`~ragen_core.rollout.chat.ChatTokens` (``compat.retokenized_text``):
            each row is its turns' ``sample_messages`` rendered and tokenised again
            (:func:`retokenized_row`) instead of the sampled ids. The batch has no
            ``engine_logprobs`` (the tokens are not the sampled ones), and the episode score sits on
            the row's last trained position (its last column with ``turn_start_id``, spec 5.8). A
            row whose oldest turns the rollout dropped (spec 5.6) trains its remaining turns; with
            ``turn_level`` on a ChatML template each turn's reward sits one position after its
            end-of-turn token's prediction, on the newline's, when the mask trains that
            (``turn_start_id``; spec 5.8), else on the end-of-turn token's.
    """
    import torch

    scores = episode_scores(trajectories, normalization, grouping)
    if per_turn:
        rows: list[Trajectory] = []
        layouts: list[tuple[list[int], list[tuple[int, int]]]] = []
        episode: list[int] = []
        turn_no: list[int] = []
        for i, traj in enumerate(trajectories):
            for k, (ids, spans, _ends) in enumerate(turn_samples(traj)):
                rows.append(traj)
                layouts.append((ids, spans) if chat is None else retokenized_row(chat, _sample(traj, k), last_only=True))
                episode.append(i)
                turn_no.append(k)
        batch = _tensors(rows, layouts, pad_token_id, [scores[e] for e in episode], turn_no, False, turn_start_id, chat is not None)
        batch.episode_ids = torch.as_tensor(episode, dtype=torch.long)
        return batch
    if chat is None:
        layouts = [episode_layout(t)[:2] for t in trajectories]
    else:
        layouts = [retokenized_row(chat, _sample(t, len(t.turns) - 1), last_only=False) if t.turns else ([], []) for t in trajectories]
    # the reference moves Qwen's turn rewards onto the newline after <|im_end|> (spec 5.8)
    chatml = chat is not None and chat.end_of_turn_text == "<|im_end|>"
    return _tensors(list(trajectories), layouts, pad_token_id, scores, None, turn_level, turn_start_id, chat is not None, chatml)


def _sample(traj: Trajectory, k: int) -> list[dict[str, str]]:
    """Turn ``k``'s recorded training messages.

    Raises:
        ValueError: the rollout did not record them (it ran without ``retokenized_text``).
    """
    messages = traj.turns[k].sample_messages
    if messages is None:
        raise ValueError(f"turn {k} of episode env_id={traj.env_id} has no sample_messages: compat.retokenized_text trains on "
                         "the messages a rollout with RolloutConfig.retokenized_text=true records")
    return messages


def check_retokenized_template(tokenizer: Any) -> None:
    """Refuse, before a run starts, a chat template :func:`retokenized_row` cannot find replies in
    (one that rewrites earlier assistant messages, as templates that drop past reasoning do).

    Raises:
        ConfigError: the template does not render assistant messages verbatim (one line).
    """
    from ragen_core.rollout.chat import ChatTokens

    reply = "<think>a</think><answer>b</answer>"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": reply},
                {"role": "user", "content": "v"}, {"role": "assistant", "content": reply}]
    retokenized_row(ChatTokens(tokenizer), messages, last_only=False)


def retokenized_row(chat: ChatTokens, messages: list[dict[str, str]], *, last_only: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """``(input_ids, spans)`` of one ``compat.retokenized_text`` row (spec 5.7, 17 L1).

    ``input_ids`` are ``messages`` rendered with the chat template (no generation prompt) and
    tokenised once, as the reference does. Each span (half-open, one per assistant message, or
    the last one alone with ``last_only``) covers the tokens of the reply (as the template renders
    it: verbatim, or with surrounding whitespace trimmed) after the generation
    prefix (``<think>``: part of the prompt when the reply was sampled) and the end-of-turn token
    that closes it; a token that straddles a span's edge belongs to it.

    Raises:
        ConfigError: the template does not place assistant messages verbatim (or trimmed) after the rendering of
            the messages before them with a generation prompt (the spans cannot be found).
    """
    tok = chat.tokenizer
    text = chat.render(messages, add_generation_prompt=False)
    char_spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or (last_only and i != len(messages) - 1):
            continue
        head: str = tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        start = len(head)  # the reply as rendered: verbatim, or trimmed (Llama 3's template trims contents)
        content = next((c for c in (message["content"], message["content"].strip()) if text.startswith(c, start)), None)
        if not text.startswith(head) or content is None:
            from ragen_core.errors import ConfigError

            raise ConfigError("compat.retokenized_text needs a chat template that renders an assistant message verbatim after the "
                             "messages before it with their generation prompt; this tokenizer's does not: set compat.retokenized_text=false")
        end = start + len(content)
        if chat.generation_prefix and content.startswith(chat.generation_prefix):
            start += len(chat.generation_prefix)
        if chat.end_of_turn_text and text.startswith(chat.end_of_turn_text, end):
            end += len(chat.end_of_turn_text)
        char_spans.append((start, end))
    if getattr(tok, "is_fast", False):
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    else:  # a slow tokenizer: the token count of each text prefix
        ids = chat.encode(text)
        offsets = []
    spans: list[tuple[int, int]] = []
    for lo, hi in char_spans:
        if offsets:
            inside = [k for k, (a, b) in enumerate(offsets) if a < hi and b > lo]
            spans.append((inside[0], inside[-1] + 1) if inside else (0, 0))
        else:
            spans.append((len(chat.encode(text[:lo])), len(chat.encode(text[:hi]))))
    return ids, spans


def _tensors(
    trajectories: list[Trajectory],
    layouts: list[tuple[list[int], list[tuple[int, int]]]],
    pad_token_id: int,
    scores: list[float],
    turn_index: list[int] | None,
    turn_level: bool,
    turn_start_id: int | None = None,
    retokenized: bool = False,
    chatml: bool = False,
) -> TrainBatch:
    """Pad the rows: ``layouts[i]`` is row ``i``'s ``(input_ids, reply spans)`` (unshifted,
    half-open); ``turn_index[i]`` the turn a per-turn row holds (None: whole episodes);
    ``turn_start_id``: the shifted mask instead of the exact one (compat L2); ``retokenized``: the
    rows are re-rendered text (compat L1), no engine log-probs, the score on the last trained
    position, the spans those of the episode's last turns (its oldest may have been dropped, spec
    5.6); ``chatml`` (with ``retokenized``): each turn-level reward moves one position later, onto
    the prediction of the newline after ``<|im_end|>`` (spec 5.8), where the mask trains it."""
    import torch

    n = len(trajectories)
    length = max([len(ids) for ids, _ in layouts] + [2])
    input_ids = torch.full((n, length), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros((n, length), dtype=torch.long)
    response_mask = torch.zeros((n, length - 1), dtype=torch.float32)
    token_rewards = torch.zeros((n, length - 1), dtype=torch.float32)
    engine_lp = torch.zeros((n, length - 1), dtype=torch.float32)
    have_engine_lp = True
    turn_ends: list[list[int]] = []
    for i, (traj, (ids, spans)) in enumerate(zip(trajectories, layouts)):
        input_ids[i, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        attention_mask[i, : len(ids)] = 1
        ends: list[int] = []
        turns = traj.turns if turn_index is None else [traj.turns[turn_index[i]]]
        if retokenized and turn_index is None:  # a row cut to max_model_len holds the last turns only
            turns = turns[len(turns) - len(spans) :]
        for turn, (start, end) in zip(turns, spans):
            if end <= start or start < 1:
                ends.append(max(0, start - 1))
                continue
            response_mask[i, start - 1 : end - 1] = 1.0
            ends.append(end - 2)
            lps = turn.response_logprobs
            if lps is not None and len(lps) == end - start and not retokenized:
                engine_lp[i, start - 1 : end - 1] = torch.as_tensor(lps, dtype=torch.float32)
            else:
                have_engine_lp = False
        turn_ends.append(ends)
        if turn_start_id is not None:
            compat = shifted_mask(ids, turn_start_id, last_turn_only=turn_index is not None)
            response_mask[i, : len(compat)] = torch.as_tensor(compat, dtype=torch.float32)
            have_engine_lp = False
        last = ends[-1] if ends else max(0, len(ids) - 2)
        if retokenized and turn_start_id is not None:  # the row's last column, which the reference's mask trains (spec 5.8)
            last = max(0, len(ids) - 2)
        if turn_level:
            for turn, pos in zip(turns, ends):
                if chatml and pos + 1 < length - 1 and response_mask[i, pos + 1] > 0:
                    pos += 1
                token_rewards[i, pos] += float(turn.reward + turn.penalty)
        else:
            token_rewards[i, last] = float(scores[i])
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        token_rewards=token_rewards,
        group_ids=torch.as_tensor([t.group_id for t in trajectories], dtype=torch.long),
        episode_ids=torch.arange(n, dtype=torch.long),
        scores=row_scores(token_rewards),
        turn_ends=turn_ends,
        engine_logprobs=engine_lp if (have_engine_lp and n > 0 and not retokenized) else None,
        tags=[t.tag for t in trajectories],
        env_rewards=torch.as_tensor([t.env_reward for t in trajectories], dtype=torch.float64),
    )


def shifted_mask(ids: Sequence[int], turn_start_id: int, *, last_turn_only: bool = False) -> list[float]:
    """The reference's loss mask over the ``len(ids) - 1`` shifted positions of one row (spec 5.7,
    17 L2; ``compat.shifted_mask``).

    Position ``t`` (predicting token ``t+1``) is trained when the number of turn-start tokens in
    ``ids[: t + 1]`` is odd and above 1: the system message is turn 1, the first user message turn
    2, the first assistant turn 3. Because of the shift an assistant turn trains its role name and
    newline, the generation prefix, the reply, the end-of-turn token, the newline after it and
    the *next* turn-start token. ``last_turn_only`` (one row per turn, the windowed context
    modes): everything from the row's last turn-start token on is trained.

    Raises:
        ValueError: ``ids`` hold no turn-start token (the mask would train nothing).
    """
    n = max(len(ids) - 1, 0)
    starts = [t for t, tok in enumerate(ids) if tok == turn_start_id]
    if not starts:
        raise ValueError(f"compat.shifted_mask: a training row holds no turn-start token (id {turn_start_id}), so the "
                         "reference's mask would train nothing; set compat.shifted_mask=false")
    if last_turn_only:
        first = max(starts[-1] - 1, 0)
        return [1.0 if t >= first else 0.0 for t in range(n)]
    out: list[float] = []
    count = 0
    for t in range(n):
        count += ids[t] == turn_start_id
        out.append(1.0 if count > 1 and count % 2 == 1 else 0.0)
    return out


def batch_divisor(env_groups: int, mini_batch_size: int, ranks: int) -> int:
    """``lcm(env_groups, mini_batch_size, ranks)``: the multiple :func:`adjust_batch` pads or cuts
    a batch to (spec 7.3; the reference's defaults give lcm(8, 32, 1) = 32)."""
    return math.lcm(env_groups, mini_batch_size, ranks)


def adjusted_rows(size: int, divisor: int, mode: str, rng: np.random.Generator) -> list[int]:
    """Row indices of a ``size``-row batch after spec 7.3's adjustment (``compat.batch_adjust``).

    ``none``, or ``size`` already a multiple of ``divisor``: every row once. ``copy``: every row,
    then ``divisor - size % divisor`` rows drawn at random (without replacement unless more are
    needed than there are rows). ``delete``: every row but ``size % divisor`` drawn at random, in
    batch order (all of them when ``size < divisor``).
    """
    rest = size % divisor
    if mode == "none" or rest == 0:
        return list(range(size))
    if mode == "copy":
        need = divisor - rest
        return list(range(size)) + [int(i) for i in rng.choice(size, need, replace=need > size)]
    if mode == "delete":
        gone = {int(i) for i in rng.choice(size, rest, replace=False)}
        return [i for i in range(size) if i not in gone]
    raise ValueError(f"compat.batch_adjust={mode!r} is not one of none, copy, delete")


def adjust_batch(batch: TrainBatch, divisor: int, mode: str, rng: np.random.Generator, *, per_turn: bool = False) -> TrainBatch:
    """``batch`` with its rows copied or deleted to a multiple of ``divisor`` (:func:`adjusted_rows`;
    spec 7.3, 17 L8, ``compat.batch_adjust``); ``batch`` itself when nothing changes.

    A copy is a full copy of its row (group, tokens, rewards, log-probs). With one row per episode
    it also gets an episode id of its own: the reference's episode rows carry none, so its group
    statistics count every row, copies too. One row per turn (``per_turn``) keeps the copied row's
    episode id, as the reference's turn rows do: the statistics count an episode once, the loss
    counts the copy.
    """
    import torch

    rows = adjusted_rows(len(batch), divisor, mode, rng)
    if rows == list(range(len(batch))):
        return batch
    out = batch.select(rows)
    n = len(batch)
    if per_turn or len(rows) <= n:
        return out
    ids = out.episode_ids.clone()
    base = int(batch.episode_ids.max()) + 1
    ids[n:] = torch.arange(base, base + len(rows) - n, dtype=ids.dtype)
    return replace(out, episode_ids=ids)


def row_scores(token_rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` episode scores in the rewards' dtype, summed by :func:`ragen_core.masked.row_sums`, so
    equal rewards at different positions give equal scores (a token-order float32 sum can differ in
    the last bit, and a flat group would look non-flat to the filter and the early stop)."""
    from ragen_core.masked import row_sums

    return row_sums(token_rewards).to(token_rewards.dtype)


def micro_batches(rows: Sequence[int], size: int) -> list[list[int]]:
    """Contiguous chunks of ``rows`` with at most ``size`` rows (the last may be smaller)."""
    rows = list(rows)
    return [rows[i : i + size] for i in range(0, len(rows), size)]
