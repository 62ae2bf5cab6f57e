"""The ``ragen run`` configuration: one validated pydantic model for a whole training run.

Defaults are sized for the CPU-friendly ``tiny`` model so that ``ragen run --env bandit`` finishes
on a laptop: 4 env groups x 8 members (32 episodes per step), 48 new tokens per turn, 20 steps.
The reference's GPU defaults (spec section 2: 8 x 16 episodes, 400 tokens, lr 1e-6, 200 steps)
are one YAML file away. Every field has a default and an attribute docstring; unknown keys are
errors that name the field path (``extra="forbid"``).

The model is loaded with :func:`ragen_core.config.load_config` from YAML files plus dotted
overrides (``rollout.group_size=16``).
"""

from __future__ import annotations

import difflib
import math
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ragen_core.interfaces.engine import SamplingParams
from ragen_core.specs import CheckedModel


class _Section(CheckedModel):
    # allow_inf_nan=False: an inf or NaN setting (``rollout.format_penalty=-.inf``, ``optim.lr=inf``)
    # is refused here in one line instead of surfacing as a NaN loss or a crash steps later
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True, allow_inf_nan=False)


#: Rollout settings that say how many episodes run and where or how they are scheduled, not how
#: an episode runs: left out when two runs' episodes are compared (shipped-policy match, eval of a run).
BATCH_ROLLOUT_KEYS = frozenset({"env_groups", "group_size", "pool", "pool_config", "async_rollout"})

#: Largest accepted ``seed`` / ``seed_val``: training seeds count up from ``seed`` and seeds feed
#: 64-bit generators (torch, NumPy), so a base below 2**63 leaves room for every later step.
MAX_SEED = 2**63 - 1

#: Env step timeout of run configs (``rollout.pool_config.step_timeout_s``): far above any env's
#: step we know of (a sandboxed test run, a Lean check, a web-shop request), far below "forever".
DEFAULT_STEP_TIMEOUT_S = 600.0

#: Env reset timeout of run configs (``rollout.pool_config.reset_timeout_s``): a worker's resets of
#: one rollout, its envs' data loaded on the first; below ``watchdog_s`` (1800 s), so a hung reset
#: is named (env, seed) in one line before the watchdog dumps stacks.
DEFAULT_RESET_TIMEOUT_S = 600.0

#: ``device`` values: ``auto``, ``cpu``, ``cuda`` / ``cuda:N``, ``mps``, ``xpu`` / ``xpu:N``.
DEVICE_PATTERN = r"^(auto|cpu|mps|(cuda|xpu)(:\d+)?)$"

#: ``loggers`` values.
LoggerName = Literal["jsonl", "tensorboard", "wandb", "console"]


def _jsonl_only() -> list[LoggerName]:
    return ["jsonl"]


#: Sampling for one rollout mode (spec 6.2): the engines' own config, so the run config and
#: ``Engine.generate`` cannot drift apart (same fields, defaults and ``extra="forbid"``).
SamplingSection = SamplingParams


def _val_sampling() -> SamplingSection:
    return SamplingSection(temperature=0.5)


class SamplingConfig(_Section):
    train: SamplingSection = Field(default_factory=SamplingSection)
    """Training rollouts: temperature 1.0, top-p 1, no top-k (spec 6.2)."""
    val: SamplingSection = Field(default_factory=_val_sampling)
    """Validation and ``ragen eval``: sampled at temperature 0.5 (not greedy)."""


class RolloutSection(_Section):
    """How many episodes each step collects, and prompt-layout settings."""

    env_groups: int = Field(default=4, ge=1)
    """Prompt groups per training step (reference 8)."""
    group_size: int = Field(default=8, ge=1)
    """Episodes per group sharing one seed (reference 16)."""
    max_turns: int | None = Field(default=None, ge=1)
    """Model turns per episode; ``None`` uses the env config's ``max_turns``."""
    max_model_len: int = Field(default=3600, ge=16)
    """Context cap (spec default 3600); the pre-flight check needs prompt + ``max_new_tokens`` to
    fit. Left at its default it shrinks to the model's ``max_position_embeddings`` when that is
    smaller; set explicitly above it, the run is refused before rollout. A ``max_new_tokens`` (train
    or val) of this size or more is refused with the config (``--print-config`` too)."""
    format_penalty: float = Field(default=-0.1, le=0)
    """Added once per turn whose reply did not parse or named unknown actions."""
    enforce_env_max_tokens: bool = False
    """Make the env's ``max_tokens`` a real cap: each reply stops at ``min(sampling.<train|val>.max_new_tokens,
    env max_tokens)`` and the prompt's "max response length" states that number. False (the reference):
    ``max_tokens`` is only that hint, and replies may use the whole ``max_new_tokens``."""
    enable_think: bool = True
    """``<think>..</think><answer>..</answer>`` replies (False: answer only)."""
    pool: str = "local"
    """Env pool plugin that runs the env instances (``local``: this process; ``process``: worker
    processes; see ``ragen plugins --kind pool``)."""
    pool_config: dict[str, Any] = Field(default_factory=dict, validate_default=True)
    """The pool's settings (e.g. ``{"step_timeout_s": 30, "workers": 8}``), validated by its config model.
    ``step_timeout_s`` defaults to :data:`DEFAULT_STEP_TIMEOUT_S` in runs (the pools' own default
    waits forever): an episode whose env step takes longer ends with ``end_reason="timeout"`` and
    the run goes on. ``reset_timeout_s`` defaults to :data:`DEFAULT_RESET_TIMEOUT_S`: a reset that
    takes longer stops the run in one line naming the env and seed. ``null`` for either waits
    forever (the run's ``watchdog_s`` still ends a hang)."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Further ``RolloutConfig`` fields passed through verbatim to the rollout runner."""
    async_rollout: bool = False
    """Overlap the rollout of step t+1 with the update of step t (:mod:`ragen_core.trainer.async_rollout`):
    one step off-policy, the PPO ratio taken against the log-probs of the weights that sampled each
    episode (a frozen copy of the policy: twice the weight memory). ``rollout/policy_lag`` logs the
    gap (1 from step 2 on). Not with several ranks or ``grad_analysis``."""

    @field_validator("pool")
    @classmethod
    def _registry_spelling(cls, value: str) -> str:
        """The pool's name as the registry resolves it (``Process`` is recorded as ``process``)."""
        from ragen_core.specs import normalize_choice

        return normalize_choice(value)

    @field_validator("pool_config", mode="before")
    @classmethod
    def _null_is_defaults(cls, value: Any) -> Any:
        """``rollout.pool_config=null`` clears the pool's settings (see ``RunConfig.env_config``)."""
        return {} if value is None else value

    @field_validator("pool_config")
    @classmethod
    def _default_timeouts(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {"step_timeout_s": DEFAULT_STEP_TIMEOUT_S, "reset_timeout_s": DEFAULT_RESET_TIMEOUT_S, **value}


#: Rollout settings added after shipped warm policies and cached warm starts recorded the rollout
#: settings they were made with, by their default: left out of those records while at it, so the
#: records' keys stay what they were (see :func:`rollout_record`).
LATER_ROLLOUT_DEFAULTS: dict[str, Any] = {"enforce_env_max_tokens": False}


def rollout_record(rollout: RolloutSection, exclude: set[str]) -> dict[str, Any]:
    """``rollout`` as the warm-start cache key and the warm-policy check key record it: its settings
    but ``exclude``, and those of :data:`LATER_ROLLOUT_DEFAULTS` only when they differ from the default."""
    out = rollout.model_dump(mode="json", exclude=exclude)
    for key, default in LATER_ROLLOUT_DEFAULTS.items():
        if out.get(key, default) == default:
            out.pop(key, None)
    return out


class PeftSection(_Section):
    """LoRA adapters (needs the optional ``peft`` package)."""

    rank: int = Field(default=0, ge=0)
    """0 = full fine-tuning (LoRA off)."""
    alpha: int = Field(default=64, ge=1)
    target_modules: str | list[str] = "all-linear"


class OptimSection(_Section):
    """Optimiser and update schedule (spec 2.2, 2.4, 8.8)."""

    lr: float = Field(default=1e-4, gt=0, le=1e6)
    """Actor AdamW learning rate (reference 1e-6 for 3B models; the tiny model needs more). The
    bound only catches typos: AdamW moves every weight by about ``lr`` per step, and rates near
    float32's range made torch's AdamW fail with an overflow error."""
    critic_lr: float = Field(default=1e-4, gt=0, le=1e6)
    """Critic AdamW learning rate (reference 1e-5)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's moment decay rates, each in ``[0, 1)``."""
    weight_decay: float = Field(default=0.01, ge=0, le=1)
    """AdamW's decoupled weight decay, in ``[0, 1]``: each step scales every weight by
    ``1 - lr * weight_decay`` (actor and critic). Usual values are 0 to 0.1; 1 is about the largest
    in use (grokking-style runs); above that is a typo more often than a choice."""
    ppo_epochs: int = Field(default=1, ge=1)
    mini_batch_size: int = Field(default=16, ge=1)
    """Episodes per optimiser step (reference 32); the last mini-batch may be smaller."""
    micro_batch_size: int = Field(default=4, ge=1)
    """Episodes per forward/backward; gradients accumulate over a mini-batch."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Global-norm clip; a non-finite norm skips the optimiser step."""
    max_skipped_steps: int | None = Field(default=20, ge=0)
    """Stop the run (exit code 2, naming the newest checkpoint) once more than this many
    optimiser steps in a row were skipped for a non-finite gradient norm; ``None`` never stops.
    Steps count in a row while consecutive training steps each skip one (actor and critic
    together; a training step takes ``ppo_epochs`` x mini-batches steps per model). A diverged
    run skips every step; a NaN batch now and then does not come close. Every skip is reported
    on stderr as it happens, and no checkpoint is written while steps are being skipped
    (:mod:`ragen_core.trainer.divergence`)."""
    lr_warmup_steps: int = Field(default=0, ge=0)
    """Linear learning-rate warm-up over the first N training steps (actor and critic): step
    ``k`` uses ``lr * min(1, k / N)``; 0 = off. Guards a warm-started model against Adam's first
    updates, which move every weight by about ``lr`` whatever the gradient's size."""
    seq_mean_unit: Literal["row", "episode"] = "row"
    """What the ``seq-mean-*`` loss modes average over when a windowed context mode trains one row
    per turn. ``row`` (reference): every turn row is a sequence, so an episode weighs as many
    rows as it has turns, and with a group-mean baseline the long (often failed) episodes tilt
    the tokens every reply shares (the format) towards negative advantage. ``episode``: the rows
    of an episode share one sequence's weight (``1/turns`` each), as one row per episode does in
    ``full`` mode. No effect in ``full`` mode or with ``token-mean``."""
    filter_loss_scaling: Literal["none", "linear", "sqrt"] = "none"
    """Multiply advantages by 1, kept ratio, or its square root (spec 9.7). Only the policy-gradient
    term scales: the entropy and KL terms are not scaled (spec 17 L20)."""
    peft: PeftSection | None = None
    """LoRA settings, or ``None`` for full fine-tuning."""
    float32_weights: bool = False
    """Train a bfloat16 model's weights as float32. AdamW on bfloat16 weights loses every update
    smaller than bfloat16's resolution (about 0.4 % of a weight: most of them at ``lr=1e-6``);
    this keeps them, for twice the weight memory, and the in-process engine then generates in
    float32. float16 weights are always trained as float32. With LoRA it applies to the PPO critic
    (a full copy that trains every weight); the policy's adapters are float32 anyway and its base
    stays frozen as it is."""

    @property
    def lora(self) -> bool:
        """LoRA is on: ``peft`` is set with a rank above 0."""
        return self.peft is not None and self.peft.rank > 0

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        for i, beta in enumerate(value):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"betas[{i}]={beta} is outside [0, 1) (AdamW's decay rates; default (0.9, 0.999))")
        return value


class RewardSection(_Section):
    """Reward placement and normalisation (spec 5.8-5.9)."""

    turn_level: bool = False
    """Put each turn's reward (plus its penalty) on that turn's last token instead of the episode total on the last token."""
    normalization: Literal["identity", "mean", "mean_std", "asym_clip"] = "identity"
    grouping: Literal["state", "inductive", "batch"] = "state"


class WarmStartSection(_Section):
    """Supervised warm start on random legal actions in the reply format (no oracle)."""

    enabled: bool | Literal["auto"] = "auto"
    """``auto`` = on for the ``tiny`` model only."""
    start_from: Literal["shipped", "scratch"] = "shipped"
    """``shipped``: start from the warm policy that ships with ragen-core (``ragen warm-policy
    build`` made it; :mod:`ragen_core.trainer.warm_policy`): used as it is when the build measured
    this run's env settings at least 0.05 above ``target_valid_rate`` (one check's noise), else
    checked on the run's seeds and, below the gate, trained further like a fresh model.
    ``scratch``: warm-start the randomly initialised tiny model."""
    episodes: int = Field(default=64, ge=1)
    """Demonstration episodes to generate."""
    epochs: int = Field(default=6, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    """Constant AdamW rate (on Bandit 1e-3 at batch 16 copied arm names where 3e-3 at batch 8 stalled)."""
    batch_size: int = Field(default=16, ge=1)
    micro_batch_size: int = Field(default=4, ge=1)
    """Rows per forward/backward pass of an SFT step; gradients add up to ``batch_size`` rows, so
    the step is the same and memory follows this number (batch 16 at once peaked at 5.5 GB on
    Sudoku's multi-turn episodes with the tiny model, 4 at a time at ~2 GB)."""
    thoughts: list[str] = Field(default_factory=lambda: ["", "{a}", "I pick {a}."])
    """Reasoning texts of the demonstrations, one drawn per reply; ``{a}`` is the (random) action."""
    balanced: bool = True
    """Show every legal action of a state equally often across the demonstrations (random order
    per state) instead of drawing each independently; independent draws leave rarely visited
    states lopsided, and the model learns that tilt as a preference RL must first undo."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """``cosine`` decays the rate to 0 within each round (restarting every round). On Bandit it
    learned more slowly than ``constant`` (69 % vs 91 % valid after three rounds)."""
    spaced: bool = True
    """Write replies as ``<think> .. </think> <answer> a </answer>`` (the spacing of the prompt's
    format line) instead of without spaces; copying from the prompt's example is then easier."""
    stray_share: float = Field(default=0.25, ge=0, le=1)
    """Share of demonstration turns of envs without fixed action names (free-form actions such as
    Sudoku's placements) whose action was drawn for another state of the round: usually rejected
    there (a clash, a cell already filled), so the demonstrations also show the reply format after
    a rejected move, which is what a model meets in its first RL steps. Without them the tiny model
    kept Sudoku's format only on the first turn (it had seen "Valid move" feedback only). Envs with
    action names (every name well formed) keep their legal-action demonstrations."""
    max_turns: int | None = Field(default=None, ge=1)
    """Turns per demonstration episode (``None`` = as in training); fewer turns make SFT steps of
    multi-turn envs much cheaper while still showing the reply format after an observation."""
    prompt_loss_weight: float = Field(default=0.0, ge=0)
    """Weight of the next-token loss on prompt/observation tokens (0 = reply tokens only).
    Above 0 the whole sequence is run with gradients, which teaches a fresh model to copy the
    names it reads (the prompt repeats them) at about 3x the cost per step."""
    target_valid_rate: float = Field(default=0.9, ge=0, le=1)
    """Quality gate: after each SFT round the format-valid rate (reply parses and names known
    actions) is measured with the real runner at the training temperature on fresh seeds; more
    demonstrations and epochs follow until it reaches this rate or the budget is spent
    (0 = one round, measured but not gated)."""
    check_episodes: int = Field(default=32, ge=1)
    """Episodes of each valid-rate measurement."""
    max_rounds: int = Field(default=4, ge=1)
    """Most SFT rounds; each adds ``episodes`` fresh demonstrations and trains ``epochs`` epochs."""
    max_seconds: float = Field(default=600.0, gt=0)
    """Time budget of the warm start: no SFT batch and no new round starts after it (the round
    in progress still checks its valid rate, 32 episodes: allow for that)."""
    on_gate_miss: Literal["stop", "continue"] = "stop"
    """What a run does when the warm start ends below ``target_valid_rate``: ``stop`` with a
    one-line error saying what it reached, or ``continue`` training from that model (said on the
    console and kept in the run's ``warm_start.json``). A missed warm start is never cached."""
    cache_dir: str | None = None
    """Cache of warm-started model folders, keyed by env, preset, config hash and seed;
    ``None`` = ``$RAGEN_CACHE/warmstart`` or ``~/.cache/ragen/warmstart``."""

    @field_validator("thoughts")
    @classmethod
    def _thoughts_fill_only_a(cls, value: list[str]) -> list[str]:
        import string

        for i, text in enumerate(value):
            try:
                fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
            except ValueError as exc:
                raise ValueError(f"thoughts[{i}] cannot be filled in ({exc}): the only placeholder is {{a}} (the action); "
                                 "write {{ and }} for literal braces") from None
            for name, spec, conv in fields:  # checked, not filled: '{a:>99999999999}' asked for 100 GB
                if name != "a" or spec or conv:
                    raise ValueError(f"thoughts[{i}] has the placeholder {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}: "
                                     "the only placeholder is {a} (the action), with no format; write {{ and }} for literal braces")
        return value


class EarlyStopSection(_Section):
    """Early-stopping rules of spec section 12."""

    reward_variance_collapse: bool = True
    low_val_success: bool = True
    low_val_success_patience: int = Field(default=5, ge=1)


class GradAnalysisSection(_Section):
    """Gradient analysis (spec 11): per reward-std bucket, the grad norm of each loss component."""

    every: int = Field(default=0, ge=0)
    """Analyse at steps where ``(step - 1) % every == 0`` (1, 51, 101, ... for 50); 0 = off."""
    buckets: int = Field(default=6, ge=1)
    """Number of reward-std buckets (an ``all`` bucket is always added)."""
    bucketing: Literal["quantile", "fixed_rv"] = "quantile"
    """``quantile``: equal numbers of groups in ascending std order (the last bucket takes the
    remainder); ``fixed_rv``: std in ``[0,1)``, ``[1,2)``, ..., the last bucket open-ended."""
    env_groups: int | None = Field(default=None, ge=1)
    """Groups of a separate analysis rollout (``None`` = as in training; when the shape equals
    the training rollout's, the training batch itself is analysed)."""
    group_size: int | None = Field(default=None, ge=1)
    """Group size of the separate analysis rollout (``None`` = as in training)."""
    log_prefilter: bool = False
    """Also analyse the batch before filtering (metrics under ``grad_norm_prefilter/``)."""
    only: bool = False
    """Analyse only: skip the critic and actor updates of every step (the policy never changes)."""
    exit_after: bool = False
    """Stop the run right after the first analysis (no actor update, checkpoint or validation)."""


class DistributedSection(_Section):
    """How the ranks of a ``torchrun`` launch share the update (:mod:`ragen_core.trainer.distributed`)."""

    strategy: Literal["ddp", "fsdp"] = "ddp"
    """``ddp``: every rank holds the whole model and gradients are summed; ``fsdp``: the weights,
    gradients and optimiser states of the policy and critic are sharded over the ranks (FSDP2), and each rank
    generates with an unsharded copy. ``fsdp`` needs several ranks; no LoRA or async rollout."""


class CompatSection(_Section):
    """Reference quirks that published numbers depend on (spec section 17, the items marked
    [compat]), each turned back on by one setting. Every default is the fixed behaviour; set
    them only to repeat the reference step for step."""

    batch_adjust: Literal["none", "copy", "delete"] = "none"
    """Spec 7.3 / 17 L8. After filtering, a kept batch whose row count is not a multiple of
    ``lcm(rollout.env_groups, optim.mini_batch_size, ranks)`` gets ``copy``: randomly chosen kept
    rows appended as full copies (same group, so they enter the group mean and std of GRPO and
    weigh twice in the loss; in the windowed context modes, one row per turn, a copied row keeps
    its episode, which the group statistics count once, as the reference's do), or ``delete``:
    that many random rows removed (a batch smaller than the multiple is removed whole: the step
    trains nothing and counts towards ``filter_config.empty_stop_steps``; a run whose every step
    must end so is warned about at its start). Drawn from ``seed`` and the step. ``none``:
    mini-batches have variable size and nothing is copied or removed."""
    shifted_mask: bool = False
    """Spec 5.7 / 17 L2. Train, for each assistant turn, what the reference's mask trains: the role
    name and newline after the turn-start token (``<|im_start|>``), the generation prefix
    (``<think>``), the reply, the end-of-turn token, the newline after it and, for a turn that is
    not the last, the next turn-start token (the windowed context modes, one row per turn: from
    the reply's turn-start token to its end). The episode score stays on the last sampled token (a
    row here ends there; the reference's ends with one more newline). ``false``: exactly the
    sampled tokens. Needs a chat template whose messages open with ``<|im_start|>`` or
    ``<|start_header_id|>``."""
    prompt_merge_quirk: bool = False
    """Spec 3.2 / 5.1 / 17 L30. Build the system prompt's appendices from the env's *default*
    config, as the reference did: the symbol legend of the default vocabulary (a
    SokobanDifferentGridVocab prompt lists ``#: wall, ...`` while its grid shows ``W``), no
    coordinate hint for an ``observation_format: coord`` config (and the grid legend instead), the
    action list. The task text itself still follows the config (a ``grid_coord`` preset names its
    coordinates, as the reference's CoordSokoban instruction does). Reaches every prompt a run
    builds: training and validation rollouts, the warm start's demonstrations and checks, and
    ``ragen eval``. ``false``: every appendix follows the env's own config."""
    retokenized_text: bool = False
    """Spec 5.3-5.7 / 17 L1. Keep each reply's *reconstruction* (``<think>R</think><answer>A</answer>``:
    tags re-emitted, whitespace stripped, special strings removed, actions past
    ``max_actions_per_turn`` cut; an unparsed reply as sampled) instead of its sampled ids: later
    prompts show it, and a training row is the conversation rendered with the chat template
    (invalid-action warnings left out) and tokenised again, so the trained tokens can differ from
    the sampled ones. The mask covers each reconstructed reply after the generation prefix and the
    end-of-turn token closing it (``shifted_mask`` on: the reference's mask over that row), the
    episode score sits on the last trained position, the engine's log-probs go unused and old
    log-probs come from the training model. In the ``full`` context mode a prompt too long for
    ``rollout.max_model_len`` minus the reply budget drops its oldest turns as the reference's
    does (spec 5.6: a user, assistant, ``Reward`` user triple at a time; the system prompt stays)
    instead of ending the episode (``context_length``), and a training row is cut the same way to
    ``max_model_len``; the reference reserved no room for the reply (17 L3), this does. With
    ``reward.turn_level`` and ``shifted_mask`` each turn's reward sits on the newline after its
    ``<|im_end|>`` (spec 5.8). Training rollouts, validation and ``ragen eval`` play
    so; the warm start's demonstrations do not (they train on their sampled ids). ``false``:
    prompts append the sampled ids, which are what trains."""


#: ``compat`` settings that change what the model is shown (the prompts), so the warm start and
#: the warm-policy format check depend on them (see :func:`prompt_compat_record`).
PROMPT_COMPAT_KEYS = ("prompt_merge_quirk", "retokenized_text")


def prompt_compat_record(compat: CompatSection) -> dict[str, Any]:
    """The prompt-changing ``compat`` settings that are on, as the warm-start cache key and the
    warm-policy check key record them: ``{}`` while all are off (so those keys stay what they were
    before the settings existed), else ``{"compat": {name: value}}``."""
    on = {key: value for key, value in compat.model_dump(mode="json", include=set(PROMPT_COMPAT_KEYS)).items() if value}
    return {"compat": on} if on else {}


class RunConfig(_Section):
    """Everything a training run needs; written to ``RUN_DIR/config.yaml``."""

    OTHER_NAMES: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("checkpoint_freq", "save_steps", "save_interval"), "save_freq"),
        **dict.fromkeys(("eval_freq", "val_freq", "eval_steps", "eval_interval"), "test_freq"),
        **dict.fromkeys(("max_steps", "total_steps", "total_training_steps", "num_steps", "training_steps"), "steps"),
        **dict.fromkeys(("lr", "learning_rate"), "optim.lr"),
        **dict.fromkeys(("group_size", "num_generations", "rollout_n", "n_samples_per_prompt"), "rollout.group_size"),
        **dict.fromkeys(("temperature",), "sampling.train.temperature"),
        **dict.fromkeys(("max_new_tokens", "response_length", "max_response_length"), "sampling.train.max_new_tokens"),
        **dict.fromkeys(("max_turns",), "rollout.max_turns"),
        **dict.fromkeys(("model_name", "model_path", "model_name_or_path"), "model"),
        **dict.fromkeys(("env_name",), "env"),
    }
    """Names other trainers (veRL, TRL, RAGEN's own scripts) give a setting, by the setting they mean
    here: an unknown key among them is answered with ours (``checkpoint_freq`` -> ``save_freq``), which
    spelling alone does not find."""

    env: str = "bandit"
    """Env plugin name (``ragen plugins`` lists them)."""
    env_config: dict[str, Any] = Field(default_factory=dict)
    """Config of the env plugin (validated by the env's config model)."""
    preset: str | None = None
    """Named env preset (e.g. ``CoordSokoban``)."""
    algo: str = "grpo"
    algo_preset: str | None = None
    """Named preset of the algorithm (``ragen plugins show algorithm NAME`` lists them, e.g. drgrpo's ``constant-norm``)."""
    algo_config: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the algorithm's config (clip ratios, entropy_coeff, loss_agg_mode, ...)."""
    filter: str = "none"
    filter_preset: str | None = None
    """Named preset of the filter."""
    filter_config: dict[str, Any] = Field(default_factory=dict)
    filter_signal: Literal["score", "env_reward"] = "score"
    """The episode rewards the filter ranks groups by. ``score`` (reference): env reward plus format
    penalty, after ``reward.normalization`` (what the update trains on), so format penalties alone
    can give a group spread. ``env_reward``: the task reward alone, before the penalty and the
    normalisation (spec 17 L19). The ``rollout/in_group_reward_*`` metrics, the
    reward-variance early stop and the gradient analysis's buckets (``grad_analysis``) read the
    same rewards; the update always trains on the score."""
    model: str = "tiny"
    """``tiny`` (the small local model: runs start from its shipped warm policy, see ``warm_start``)
    or a local HF model folder."""
    engine: str = "hf"
    engine_config: dict[str, Any] = Field(default_factory=dict)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    optim: OptimSection = Field(default_factory=OptimSection)
    reward: RewardSection = Field(default_factory=RewardSection)
    warm_start: WarmStartSection = Field(default_factory=WarmStartSection)
    early_stop: EarlyStopSection = Field(default_factory=EarlyStopSection)
    grad_analysis: GradAnalysisSection = Field(default_factory=GradAnalysisSection)
    distributed: DistributedSection = Field(default_factory=DistributedSection)
    compat: CompatSection = Field(default_factory=CompatSection)
    """Reference quirks reproduced on request (:class:`CompatSection`); defaults are the fixes."""
    steps: int = Field(default=20, ge=1)
    """Training steps."""
    save_freq: int = Field(default=10, ge=-1)
    """Checkpoint every N steps and at the last step; -1 only at the end; 0 never."""
    keep_checkpoints: int = Field(default=2, ge=1)
    """Checkpoints kept: a new one removes the oldest beyond this many intact ones (a damaged
    checkpoint, whose files differ in size from its manifest, is not counted)."""
    test_freq: int = Field(default=5, ge=0)
    """Validate every N steps and at the last step; 0 disables validation."""
    val_before_train: bool = False
    val_groups: int = Field(default=16, ge=1)
    """Validation groups (group size 1, seeds ``seed_val + g``)."""
    val_group_size: int = Field(default=1, ge=1)
    seed: int = Field(default=10000, ge=0, le=MAX_SEED)
    """Base seed for training resets and all trainer randomness (0 to 2**63 - 1)."""
    seed_val: int = Field(default=123, ge=0, le=MAX_SEED)
    """Base seed of the fixed validation set (0 to 2**63 - 1)."""
    run_dir: str | None = None
    """Output directory; default ``runs/<env>-<algo>-<YYYYmmdd-HHMMSS>-<suffix>``."""
    diagnostics: list[str] = Field(default_factory=list)
    """Diagnostic plugins to attach (e.g. ``collapse``)."""
    diagnostics_config: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per-diagnostic config, keyed by name."""
    loggers: list[LoggerName] = Field(default_factory=_jsonl_only)
    """JSONL is always written; TensorBoard / W&B (offline) when importable."""
    save_rollouts: bool = False
    """Write ``rollouts/step_<N>.jsonl`` for every step."""
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    """``auto`` = CUDA when available, else CPU; or ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``, ``xpu:N``."""
    progress: bool = True
    """Show progress: a tqdm bar on a terminal; elsewhere (a log file, CI) plain lines, at most one
    every 30 s (:mod:`ragen_core.trainer.progress`)."""
    watchdog_s: float | None = Field(default=1800.0, gt=0)
    """End the run (exit code 3) when nothing progresses for this many seconds -- no training
    step, checkpoint, or rollout turn completed -- after writing every thread's stack to stderr
    and ``RUN_DIR/watchdog-stacks.txt`` (:mod:`ragen_core.trainer.watchdog`); ``None`` = off.
    Raise it when one update phase (or checkpoint save) of a large model takes longer."""

    @field_validator("env", "algo", "filter", "engine", "diagnostics")
    @classmethod
    def _registry_spelling(cls, value: str | list[str]) -> str | list[str]:
        """Plugin names as the registry resolves them (``--algo GRPO`` is recorded as ``grpo``)."""
        from ragen_core.specs import normalize_choice

        if not isinstance(value, list):
            return normalize_choice(value)
        names = [normalize_choice(name) for name in value]
        twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
        if twice is not None:  # one diagnostic per name: its settings are diagnostics_config.NAME
            raise ValueError(f"diagnostics lists {twice!r} twice: a diagnostic runs once (its settings: diagnostics_config.{twice})")
        return names

    @field_validator("model")
    @classmethod
    def _a_model_is_named(cls, value: str) -> str:
        if not value.strip():  # (ragen eval checks its own --model first: its default is another one)
            raise ValueError("names no model: give tiny (the default), a local HF model folder, or a Hugging Face model name")
        return value

    @field_validator("diagnostics_config")
    @classmethod
    def _registry_spelt_keys(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Keyed by the diagnostics' names as the registry spells them (``Collapse`` is ``collapse``)."""
        from ragen_core.specs import normalize_choice

        out: dict[str, dict[str, Any]] = {}
        typed: dict[str, str] = {}
        for key, settings in value.items():
            name = normalize_choice(key)
            if name in out:
                raise ValueError(f"diagnostics_config has both {typed[name]!r} and {key!r}, two spellings of {name!r}: keep one")
            out[name], typed[name] = settings, key
        return out

    @field_validator("env_config", "algo_config", "filter_config", "engine_config", "diagnostics_config", mode="before")
    @classmethod
    def _null_is_defaults(cls, value: Any) -> Any:
        """``filter_config=null`` clears a plugin's settings (its defaults apply): how an override
        empties settings that a config file or a resumed run's config.yaml holds."""
        return {} if value is None else value

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.optim.micro_batch_size > self.optim.mini_batch_size:
            raise ValueError("optim.micro_batch_size must not exceed optim.mini_batch_size")
        ga = self.grad_analysis
        if (ga.only or ga.exit_after) and ga.every == 0:
            raise ValueError("grad_analysis.only / exit_after need grad_analysis.every > 0")
        if self.rollout.async_rollout and ga.every > 0:
            raise ValueError("rollout.async_rollout cannot be combined with grad_analysis.every > 0 (analyse without async rollout)")
        # a reply budget that leaves no room for a prompt: no model can run it (the run also checks it against the model's
        # positions once it is loaded, ragen_core.trainer.setup.preflight, as a default max_model_len shrinks to those)
        budget = max(self.sampling.train.max_new_tokens, self.sampling.val.max_new_tokens)
        if self.rollout.max_model_len <= budget:  # both named when they tie: lowering one alone changes nothing
            tied = [f"sampling.{m}.max_new_tokens={budget}" for m in ("train", "val") if getattr(self.sampling, m).max_new_tokens == budget]
            raise ValueError(f"rollout.max_model_len={self.rollout.max_model_len} leaves no room for a prompt before "
                             f"{' and '.join(tied)}: raise the one or lower the other" + ("s" if len(tied) > 1 else ""))
        if self.distributed.strategy == "fsdp":  # FSDP runs on several ranks only, where these are refused (distributed.check_supported)
            if self.optim.lora:
                raise ValueError(f"optim.peft.rank={self.optim.peft.rank} (LoRA) is not supported with distributed.strategy=fsdp: "  # type: ignore[union-attr]
                                 "set distributed.strategy=ddp (LoRA's adapters are small enough to replicate)")
            if self.rollout.async_rollout:
                raise ValueError("rollout.async_rollout is not supported with distributed.strategy=fsdp (several ranks): "
                                 "set rollout.async_rollout=false")
            if ga.every > 0:
                raise ValueError(f"grad_analysis.every={ga.every} is not supported with distributed.strategy=fsdp (several ranks): "
                                 "run the gradient analysis in one process with distributed.strategy=ddp")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.rollout.env_groups * self.rollout.group_size


def check_plugin_configs(config: RunConfig) -> None:
    """Validate the settings of every plugin a run names, from specs only: env, algorithm,
    estimator, filter, engine, env pool and diagnostics; and the settings that combine them
    (loss scaling set twice, ``rollout.extra``).

    Imports no implementation (no torch), so a bad recipe, config file or override is reported
    before a model loads (``ragen run`` and ``--print-config`` call it first; so does
    :meth:`Trainer.setup <ragen_core.trainer.trainer.Trainer.setup>`). Raises the registry's errors
    (:class:`~ragen_core.errors.PluginConfigError` naming the field path,
    :class:`~ragen_core.errors.PluginNotFoundError`).
    """
    from ragen_core import registry
    from ragen_core.errors import ConfigError

    # where=: errors name each key where the run config holds it (env_config.max_turns), as typed
    registry.make_config("env", config.env, dict(config.env_config), preset=config.preset, where="env_config")
    algo = registry.make_config("algorithm", config.algo, dict(config.algo_config), preset=config.algo_preset, where="algo_config")
    registry.make_config("estimator", algo.estimator, dict(algo.estimator_config), preset=algo.estimator_preset,  # type: ignore[attr-defined]
                         where="algo_config.estimator_config")
    _critic_agrees(config.algo, algo)
    budget_check = getattr(algo, "check_response_budget", None)  # AlgorithmConfig's (DAPO's overlong window)
    if budget_check is not None:
        budget_check(config.sampling.train.max_new_tokens)
    filter_config = registry.make_config("filter", config.filter, dict(config.filter_config), preset=config.filter_preset,
                                         where="filter_config")
    filter_config.check_group_size(config.rollout.group_size)  # type: ignore[attr-defined]
    if config.optim.filter_loss_scaling != "none" and getattr(filter_config, "loss_scaling", "none") != "none":
        raise ConfigError("optim.filter_loss_scaling and filter_config.loss_scaling are both set: the advantages would be scaled twice",
                          ["keep one of them (set the other to 'none')"])
    registry.make_config("engine", config.engine, dict(config.engine_config), where="engine_config")
    registry.make_config("pool", config.rollout.pool, dict(config.rollout.pool_config), where="rollout.pool_config")
    for name in config.diagnostics:
        registry.make_config("diagnostic", name, dict(config.diagnostics_config.get(name) or {}), where=f"diagnostics_config.{name}")
    _unlisted_diagnostic_settings(config)
    from ragen_core.trainer.setup import rollout_config

    for mode in ("train", "val"):  # rollout.extra: its keys and values, as the runners will take them
        rollout_config(config, mode)


def _critic_agrees(algo_name: str, algo: Any) -> None:
    """An estimator that reads a critic's values (GAE) under ``use_critic=false`` would get a critic
    anyway (the trainer builds one whenever either asks): refused, so the setting is not ignored.

    Raises:
        PluginConfigError: naming both settings and the critic-free estimators installed.
    """
    from ragen_core import registry
    from ragen_core.errors import PluginConfigError

    if getattr(algo, "use_critic", True) or not registry.get_spec("estimator", algo.estimator).needs_critic:
        return
    free = [e.name for e in registry.entries("estimator") if not registry.get_spec("estimator", e.name).needs_critic]
    raise PluginConfigError(f"algo_config.estimator={algo.estimator} computes advantages from a critic's values, but algorithm "
                            f"{algo_name!r} has algo_config.use_critic=false",
                            [f"set algo_config.use_critic=true{'' if algo_name == 'ppo' else ' (--algo ppo does)'}, or pick a critic-free estimator: "
                             f"{', '.join(sorted(free)) or 'none installed'}"])


def _unlisted_diagnostic_settings(config: RunConfig) -> list[str]:
    """Keys of ``diagnostics_config`` that no name in ``diagnostics`` reads, for installed
    diagnostics that are simply not turned on (``run_warnings`` warns about those).

    Raises:
        PluginConfigError: A key that names no installed diagnostic (one line listing the known names).
    """
    from ragen_core import registry
    from ragen_core.errors import PluginConfigError

    known = sorted({e.name for e in registry.entries("diagnostic", include_disabled=True)})
    unlisted: list[str] = []
    for key in config.diagnostics_config:  # both spelt as the registry spells names (the config's validators)
        if key in config.diagnostics:
            continue
        if key.rpartition(":")[2] not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            guess = f"did you mean {close[0]!r}? " if close else ""
            raise PluginConfigError(f"diagnostics_config.{key}: no diagnostic named {key!r}; {guess}"
                                    f"known diagnostics: {', '.join(known) or 'none installed'}")
        unlisted.append(key)
    return unlisted


def resolved_config(config: RunConfig) -> dict[str, Any]:
    """``config`` as plain data with every plugin's settings filled in from its spec (defaults,
    preset), as ``--print-config`` shows it; loading it back gives the same run."""
    from ragen_core import registry

    data = config.model_dump(mode="json")
    algo = registry.make_config("algorithm", config.algo, dict(config.algo_config), preset=config.algo_preset)
    data["env_config"] = registry.make_config("env", config.env, dict(config.env_config), preset=config.preset).model_dump(mode="json")
    data["algo_config"] = algo.model_dump(mode="json")
    data["algo_config"]["estimator_config"] = registry.make_config(
        "estimator", algo.estimator, dict(algo.estimator_config), preset=algo.estimator_preset).model_dump(mode="json")  # type: ignore[attr-defined]
    data["filter_config"] = registry.make_config("filter", config.filter, dict(config.filter_config),
                                                 preset=config.filter_preset).model_dump(mode="json")
    data["engine_config"] = registry.make_config("engine", config.engine, dict(config.engine_config)).model_dump(mode="json")
    data["rollout"]["pool_config"] = registry.make_config("pool", config.rollout.pool, dict(config.rollout.pool_config)).model_dump(mode="json")
    data["diagnostics_config"] = {name: registry.make_config("diagnostic", name, dict(config.diagnostics_config.get(name) or {}))
                                  .model_dump(mode="json") for name in config.diagnostics}
    return data


def run_warnings(config: RunConfig) -> list[str]:
    """Settings that run but probably do not do what was meant, one sentence each (from specs only).

    * ``rollout.group_size=1`` with an estimator whose baseline comes from the group
      (:attr:`EstimatorSpec.group_baseline <ragen_core.specs.EstimatorSpec.group_baseline>`): every
      group holds one episode, so the warning says what the advantage becomes instead.
    * Greedy training (``sampling.train.temperature=0`` or ``do_sample=false``) with such an
      estimator: a group's episodes are alike, so their advantages are all zero.
    * LoRA settings (``optim.peft.alpha`` / ``target_modules``) while ``optim.peft.rank`` is 0 (LoRA off).
    * The filter's own :meth:`~ragen_core.interfaces.rollout_filter.FilterConfig.rollout_warnings`
      (``snr-topk-abs`` keeping every group of the batch).
    * ``filter_signal=env_reward`` with a filter that scores groups by something else than their
      rewards (:meth:`~ragen_core.interfaces.rollout_filter.FilterConfig.scores_without_rewards`:
      ``filter_config.metric=entropy``): the signal then changes only the reward-variance early stop
      and the gradient analysis's buckets.
    * ``compat.batch_adjust=delete`` in the ``full`` context mode (one row per episode) with fewer
      episodes per step than ``lcm(rollout.env_groups, optim.mini_batch_size)``: every step's rows
      are all deleted, so nothing ever trains (each step is an empty one).
    * ``diagnostics_config.NAME`` for an installed diagnostic that ``diagnostics`` does not list:
      its settings are unused. A warning, not a refusal: turning a diagnostic off with
      ``diagnostics=[]`` while a config file keeps its settings is a normal thing to do.
    * ``engine_config.model`` of the hf engine naming another model than ``model``: the trainer
      attaches its policy, so the engine never loads it (``tiny``, the default a run's config.yaml
      recorded until it was emptied, is not warned about: a resumed run holds it unasked).
    """
    from ragen_core import registry

    out: list[str] = []
    algo = registry.make_config("algorithm", config.algo, dict(config.algo_config), preset=config.algo_preset)
    estimator = registry.get_spec("estimator", algo.estimator)  # type: ignore[attr-defined]
    baseline = getattr(estimator, "group_baseline", None)  # an EstimatorSpec field
    if config.rollout.group_size == 1 and baseline:
        out.append(f"rollout.group_size=1 with estimator {estimator.name!r}: every group holds one episode, so there is no "
                   f"group baseline and the advantage becomes {baseline}; use rollout.group_size >= 2")
    train = config.sampling.train
    if (train.temperature == 0 or not train.do_sample) and config.rollout.group_size > 1 and baseline:
        greedy, fix = (("sampling.train.do_sample=false", "sampling.train.do_sample=true") if not train.do_sample else
                       ("sampling.train.temperature=0", "sampling.train.temperature=1.0 (the default)"))
        out.append(f"{greedy} trains greedy with estimator {estimator.name!r}: the {config.rollout.group_size} episodes of a group "
                   "reply alike, so unless the env itself is random their advantages against the group baseline are all zero "
                   f"and nothing is learned; sample instead: {fix}")
    divisor = math.lcm(config.rollout.env_groups, config.optim.mini_batch_size)  # ranks can only raise it
    full = config.rollout.extra.get("context_window", "full") == "full"
    if config.compat.batch_adjust == "delete" and full and config.episodes_per_step < divisor:
        out.append(f"compat.batch_adjust=delete with {config.episodes_per_step} episodes per step (rollout.env_groups x "
                   f"rollout.group_size), fewer than the batch multiple {divisor} = lcm(rollout.env_groups, optim.mini_batch_size): "
                   "every step's rows are deleted and nothing trains; lower optim.mini_batch_size, or use compat.batch_adjust=copy")
    peft = config.optim.peft
    if peft is not None and peft.rank == 0:
        unused = [f"optim.peft.{name}" for name in ("alpha", "target_modules") if getattr(peft, name) != PeftSection.model_fields[name].default]
        if unused:
            out.append(f"{' and '.join(unused)} {'is' if len(unused) == 1 else 'are'} set but optim.peft.rank is 0, so LoRA is off and "
                       f"{'it is' if len(unused) == 1 else 'they are'} unused; to train adapters: optim.peft.rank=8 (or another rank)")
    chosen = registry.make_config("filter", config.filter, dict(config.filter_config), preset=config.filter_preset)
    out += chosen.rollout_warnings(config.rollout.env_groups, config.rollout.group_size)  # type: ignore[attr-defined]
    scored_by = chosen.scores_without_rewards() if config.filter_signal != "score" else None  # type: ignore[attr-defined]
    if scored_by:
        out.append(f"filter_signal={config.filter_signal} picks the rewards a filter scores groups by, but filter {config.filter!r} "
                   f"scores them by {scored_by}: the setting changes only the reward-variance early stop and the gradient "
                   f"analysis's buckets, not which groups train; leave filter_signal at score, or change {scored_by} to a reward score")
    engine_model = config.engine_config.get("model") if registry.get_spec("engine", config.engine).name == "hf" else None
    # the trainer attaches its policy: the engine never loads this one. "tiny" is the old default that every run's config.yaml
    # recorded before it was emptied: a resumed run of another model holds it without anyone having asked for it
    if engine_model and engine_model not in (config.model, "tiny"):
        out.append(f"engine_config.model={engine_model} is not read in a run: the hf engine samples the run's policy "
                   f"(model={config.model}); to train {engine_model}, set model={engine_model}")
    for key in _unlisted_diagnostic_settings(config):
        turned_on = ",".join([*config.diagnostics, key])
        out.append(f"diagnostics_config.{key} is set but diagnostics does not list {key!r}, so these settings are unused; "
                   f"to run it: diagnostics=[{turned_on}]")
    return out


def plain_preset(env: str, preset: str | None) -> str | None:
    """``preset``, or None when it changes none of the env's settings (Bandit's ``Bandit``, the
    reference's tag, is the defaults): naming it is then no change, for the warm-start policy match
    and for ``--resume``. ``preset`` as given when the env or preset cannot be resolved here."""
    if preset is None:
        return None
    from ragen_core import registry
    from ragen_core.errors import RagenError

    try:
        same = registry.make_config("env", env, {}, preset=preset) == registry.make_config("env", env, {})
    except (RagenError, ValueError):
        return preset
    return None if same else preset


def check_env_available(config: RunConfig) -> list[str]:
    """Run the env's availability check (:attr:`~ragen_core.specs.EnvSpec.availability`) on the
    run's env settings: a missing toolchain or server refuses (exit 2) before any work.
    :class:`~ragen_core.trainer.trainer.Trainer` calls it first, before it makes a default run
    folder; ``--print-config`` does not (it prints on any machine). Returns the check's warnings."""
    from ragen_core import registry

    env_config = registry.make_config("env", config.env, dict(config.env_config), preset=config.preset)
    return registry.get_spec("env", config.env).check_available(env_config)


def check_run_available(config: RunConfig) -> list[str]:
    """:func:`check_env_available`, then the engine's and the env pool's availability checks (vLLM
    not installed, a Ray address that does not answer): refused before the run folder, the model
    or a warm start (minutes) exist. Returns the checks' warnings (printed by the caller)."""
    from ragen_core import registry

    found = check_env_available(config)
    found += registry.get_spec("engine", config.engine).check_available(registry.make_config("engine", config.engine, dict(config.engine_config)))
    pool = config.rollout.pool
    found += registry.get_spec("pool", pool).check_available(registry.make_config("pool", pool, dict(config.rollout.pool_config)))
    return found
