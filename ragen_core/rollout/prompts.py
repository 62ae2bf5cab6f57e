"""Texts shown to the model: system prompt, per-turn user messages, reward lines (spec 5.1-5.3).

The layout follows the reference (turn number, state block, budget and format line, reward
label before the next state); the sentences are our own. Rewards are rounded for display
(spec 17 L4: ``-0.30000000000000004`` reads as ``-0.3``); training uses the raw values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PREAMBLE = "You are a helpful assistant. "
THINK_TEMPLATE = "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
ANSWER_TEMPLATE = "<answer> [your answer] </answer>"
INVALID_WARNING = "Your previous reply contained no valid action, so the state is unchanged. Please try again."


def generation_prefix(think: bool) -> str:
    """Text appended after the assistant header: the model continues inside this block."""
    return "<think>" if think else "<answer>"


def format_template(think: bool) -> str:
    """The reply template shown verbatim to the model."""
    return THINK_TEMPLATE if think else ANSWER_TEMPLATE


def format_reward(reward: float) -> str:
    """Reward as shown to the model: rounded to 4 decimals, Python float spelling (``-0.3``)."""
    value = float(reward)
    if not math.isfinite(value):
        return repr(value)
    value = round(value, 4) + 0.0  # "+ 0.0" turns -0.0 into 0.0
    return repr(value)


def reward_prefix(reward: float) -> str:
    """Start of the user message that follows an assistant turn: ``"Reward:\\n{r}\\n"``."""
    return f"Reward:\n{format_reward(reward)}\n"


def system_prompt(
    instruction: str,
    *,
    action_names: Sequence[str] | None = None,
    max_actions_per_episode: int | None = None,
    action_sep: str | None = "||",
) -> str:
    """Generic preamble + the env's own instruction + the per-episode action cap.

    Args:
        instruction: ``env.instruction()`` of the instantiated env (it carries any legend and
            action list, spec 17 L30).
        action_names: The env's fixed action vocabulary; the cap sentence is added only for
            envs that have one (as in the reference).
        max_actions_per_episode: The cap stated in the sentence.
        action_sep: Separator named in the sentence.
    """
    text = PREAMBLE + (instruction or "")
    if action_names and max_actions_per_episode:
        sep = f" {action_sep} " if action_sep else " "
        text += (
            f"\nYou may take up to {max_actions_per_episode} actions in total in this episode; "
            f"to take several in one answer, separate them with '{sep}'.\n"
        )
    return text


def budget_line(actions_left: int, max_tokens: int, think: bool) -> str:
    """Actions left, the required format, strictness and the length hint, on one line."""
    return (
        f"Actions left: {actions_left}. Always answer in exactly this format: {format_template(think)}. "
        f"Write nothing outside it and follow it strictly. Max response length: {max_tokens} words (tokens)."
    )


def turn_message(
    turn: int,
    observation: str,
    *,
    actions_left: int,
    max_tokens: int,
    think: bool = True,
    warn_invalid: bool = False,
) -> str:
    """The state block of one turn (spec 5.2): turn number, state, optional warning, budget line."""
    text = f"\nTurn {turn}:\nState:\n{observation}\n"
    if warn_invalid:
        text += INVALID_WARNING + "\n"
    return text + budget_line(actions_left, max_tokens, think) + "\n"


@dataclass(frozen=True)
class PastTurn:
    """One earlier turn as summarised by :func:`memory_message` (single-turn mode)."""

    number: int
    observation: str
    reply: str
    reward: float


def memory_message(
    turn: int,
    observation: str,
    past: Sequence[PastTurn],
    *,
    actions_left: int,
    max_tokens: int,
    think: bool = True,
    warn_invalid: bool = False,
) -> str:
    """Single-turn-mode user message: a digest of recent turns, then the current state block."""
    parts: list[str] = []
    if past:
        parts.append(f"You have played {turn - 1} turn(s) so far; the last {len(past)} are shown below.\nRecent turns:\n---")
        for p in past:
            parts.append(
                f"Turn {p.number} State:\n{p.observation}\nTurn {p.number} Action:\n{p.reply}\n"
                f"Turn {p.number} Reward:\n{format_reward(p.reward)}\n---"
            )
        header = f"Current Turn (Turn {turn}):"
    else:
        header = f"(Turn {turn}):"
    parts.append(f"{header}\nState:\n{observation}")
    if warn_invalid:
        parts.append(INVALID_WARNING)
    parts.append(budget_line(actions_left, max_tokens, think))
    return "\n".join(parts) + "\n"
