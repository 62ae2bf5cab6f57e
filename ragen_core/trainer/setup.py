"""Building the pieces of a run: model, engine, rollout runners, plugins, pre-flight checks.

Kept apart from the loop in :mod:`ragen_core.trainer.trainer` so ``ragen eval`` and the warm
start can build the same model/engine/runner without a trainer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragen_core.errors import CheckpointError, ConfigError, ResourceError
from ragen_core.trainer.config import RunConfig


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; an explicit device must exist on this machine.

    Raises:
        ConfigError: A CUDA / MPS / XPU device was asked for but is not available here.
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = name.partition(":")
    backend = {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None), "mps": getattr(torch.backends, "mps", None)}.get(kind)
    if backend is not None and not backend.is_available():
        raise ConfigError(f"device={name}: no {kind} device is available on this machine", ["use device=auto or device=cpu"])
    if index and kind != "mps" and int(index) >= backend.device_count():  # type: ignore[union-attr]
        raise ConfigError(f"device={name}: this machine has {backend.device_count()} {kind} device(s)",  # type: ignore[union-attr]
                          [f"use device={kind}:0 .. {kind}:{backend.device_count() - 1}, or device=auto"])  # type: ignore[union-attr]
    return name


def load_policy(name_or_path: str, *, device: str, safetensors_only: bool = False, lora: bool = False,
                float32: bool = False) -> tuple[Any, Any]:
    """The model and tokenizer a run trains, from ``model`` (or a checkpoint).

    Two cases differ from :func:`~ragen_core.models.load_model_and_tokenizer`:

    * a folder written by ``ragen warm-policy build --out`` (its ``build.json``) is that policy: the
      tiny model with the policy's weights (a delta policy: its base's plus the delta), in float32,
      as a run of the tiny model starts from a shipped one;
    * float16 weights are trained as float32 (one line says so): AdamW's update of float16 weights
      overflows to NaN within a step (no loss scaling here). bfloat16 stays bfloat16, and so does a
      ``lora`` run's frozen base (its adapters are float32: PEFT's default for half bases), unless
      ``float32`` (``optim.float32_weights``) asks for float32 weights.

    Raises:
        RagenError: a warm-policy folder built for another tiny model, or a delta whose base is gone.
    """
    import torch

    from ragen_core.errors import RagenError
    from ragen_core.models import load_model_and_tokenizer
    from ragen_core.trainer import warm_policy as wp
    from ragen_core.trainer.divergence import report
    from ragen_core.trainer.modeling import float32_if_half

    folder = Path(name_or_path).expanduser()
    if (folder / wp.BUILD_FILE).is_file():
        policy = wp.shipped_policy(folder)
        if policy is None:
            raise RagenError(f"model {name_or_path}: this warm policy (ragen warm-policy build) cannot be used: built for another tiny model, "
                             "or a delta whose base policy is missing or was rebuilt",
                             ["rebuild it with ragen warm-policy build --out FOLDER, or train from model=tiny"])
        model, tokenizer = load_model_and_tokenizer("tiny", device=device)
        policy.load_into(model)
        return model, tokenizer
    model, tokenizer = load_model_and_tokenizer(name_or_path, device=device, safetensors_only=safetensors_only)
    if not lora and float32_if_half(model):
        report(f"model {name_or_path} holds float16 weights: training them as float32 (an AdamW step on float16 weights "
               "overflows to NaN)")
    elif not lora and float32 and any(p.dtype == torch.bfloat16 for p in model.parameters()):
        model.float()
        report(f"model {name_or_path} holds bfloat16 weights: training them as float32 (optim.float32_weights)")
    return model, tokenizer


def make_engine(config: RunConfig, model: Any, tokenizer: Any) -> Any:
    """The rollout engine, attached to the policy as version 0 (the HF engine shares the module in-process)."""
    from ragen_core import registry

    engine = registry.make("engine", config.engine, config.engine_config)
    engine.attach(model, tokenizer)
    return engine


def rollout_config(config: RunConfig, mode: str = "train", groups: int | None = None, group_size: int | None = None) -> Any:
    """The rollout runner's config for ``mode`` (fields the runner does not know are dropped)."""
    from ragen_core.rollout.runner import RolloutConfig

    r = config.rollout
    if mode == "train":
        n_groups, size = r.env_groups, r.group_size
    else:
        n_groups, size = config.val_groups, config.val_group_size
    values: dict[str, Any] = {
        "env_groups": groups if groups is not None else n_groups,
        "group_size": group_size if group_size is not None else size,
        "max_turns": r.max_turns,
        "max_model_len": r.max_model_len,
        "format_penalty": r.format_penalty,
        "enable_think": r.enable_think,
        "enforce_env_max_tokens": r.enforce_env_max_tokens,
        "prompt_merge_quirk": config.compat.prompt_merge_quirk,
        "retokenized_text": config.compat.retokenized_text,
        "seed_train": config.seed,
        "seed_val": config.seed_val,
    }
    for key in ("prompt_merge_quirk", "retokenized_text"):
        if key in r.extra:  # it would bypass the warm-start and check keys (and the trainer's batch), which read compat
            raise ConfigError(f"invalid config: rollout.extra.{key}: set compat.{key} instead")
    values.update(r.extra)
    fields = RolloutConfig.model_fields
    unknown = [k for k in r.extra if k not in fields]
    if unknown:
        raise ConfigError(f"invalid config: rollout.extra.{unknown[0]}: unknown RolloutConfig field", [f"known fields: {', '.join(fields)}"])
    from ragen_core.config import validate

    return validate(RolloutConfig, {k: v for k, v in values.items() if k in fields and v is not None}, prefix="rollout.extra")


def make_runner(config: RunConfig, engine: Any, tokenizer: Any, mode: str = "train", *, pool: Any = None, **sizes: Any) -> Any:
    """A rollout runner whose envs run in the pool ``rollout.pool`` (built by name, config validated).

    ``pool``: an existing pool of the same env to share (the trainer's validation and analysis
    runners reuse the training runner's, so a ``process`` pool starts one set of workers; their
    rollouts never overlap in time). Otherwise a new pool is built.

    Raises:
        PluginNotFoundError / PluginConfigError: unknown pool name or bad ``rollout.pool_config``.
    """
    from ragen_core import registry
    from ragen_core.interfaces.env_pool import EnvRef
    from ragen_core.rollout.runner import RolloutRunner, with_overrides

    runner_config = rollout_config(config, mode, **sizes)
    env = with_overrides(EnvRef(name=config.env, config=dict(config.env_config), preset=config.preset), runner_config)
    if pool is None:
        pool = registry.make("pool", config.rollout.pool, dict(config.rollout.pool_config), env=env)
    return RolloutRunner(env, engine, tokenizer, runner_config, pool=pool)


def available_memory_bytes(device: str) -> int | None:
    """Free accelerator memory for CUDA devices, else available system RAM (None if unknown)."""
    if device.startswith("cuda"):
        import torch

        where = torch.device(device)  # this run's GPU, not the current one (cuda:0 unless set)
        free, _total = torch.cuda.mem_get_info(where)
        return int(free) + int(torch.cuda.memory_allocated(where))  # the loaded model is part of the estimate: not counted twice
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


#: Share of a model's parameters that LoRA adapters add, for the memory estimate (rank 16 on every
#: linear layer of a 0.5B-7B model is 0.5-2 %).
LORA_SHARE = 0.02


def estimate_training_bytes(n_params: int, bytes_per_param: int, needs_critic: bool, needs_ref: bool, lora: bool = False,
                            critic_bytes_per_param: int | None = None) -> int:
    """Weights + gradients + two AdamW moments (fp32) per trained model, plus a frozen reference.

    With ``lora`` the policy's weights are frozen: only its adapters (:data:`LORA_SHARE` of the
    parameters, float32) get gradients and moments, and the reference is the same model with the
    adapters off (no copy). The critic's weights take ``critic_bytes_per_param`` (default: the
    policy's; 4 for a float16 model, whose critic is float32)."""
    trained = n_params * (bytes_per_param + 4 + 8)
    policy = n_params * bytes_per_param + int(n_params * LORA_SHARE) * (4 + 4 + 8) if lora else trained
    critic = n_params * ((critic_bytes_per_param or bytes_per_param) + 4 + 8)
    total = policy + (critic if needs_critic else 0)
    if needs_ref and not lora:
        total += n_params * bytes_per_param
    return int(total * 1.2)


def preflight(config: RunConfig, model: Any, tokenizer: Any, *, needs_critic: bool, needs_ref: bool, device: str,
              lora: bool = False) -> None:
    """Raise :class:`ResourceError` before any rollout when the run cannot fit.

    Checks: the env resets (its first training episode, and its first validation episode when the
    run validates: an env raises :class:`~ragen_core.errors.EnvError` here, before the warm start
    and the first step); the context cap holds the first prompt plus one reply; the estimated
    training memory (weights, grads, AdamW states, critic, reference) fits the free device memory.
    """
    from ragen_core import registry

    r = config.rollout
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    cap = "rollout.max_model_len"
    raise_cap = f"raise {cap}"
    if isinstance(positions, int) and 0 < positions < r.max_model_len:
        if "max_model_len" in r.model_fields_set:
            raise ResourceError(
                f"rollout.max_model_len={r.max_model_len} is longer than the model's {positions} positions",
                [f"set rollout.max_model_len={positions} or less"],
            )
        r.max_model_len = positions  # the default cap, shrunk to what the model can attend over
        # raising the cap is refused above: the model's positions are the limit to name
        cap = f"the model's {positions} positions (its max_position_embeddings; rollout.max_model_len was lowered to it)"
        raise_cap = "use a model with more positions (max_position_embeddings)"
    budget = max(config.sampling.train.max_new_tokens, config.sampling.val.max_new_tokens)
    # the budget is the larger of the two: lowering one that ties with the other changes nothing
    lower = " and ".join(f"sampling.{m}.max_new_tokens" for m in ("train", "val") if getattr(config.sampling, m).max_new_tokens == budget)
    reply = "max_new_tokens"  # what bounds a reply, as the error names it
    if r.max_model_len <= budget:
        shown = f"rollout.max_model_len={r.max_model_len}" if cap == "rollout.max_model_len" else cap
        raise ResourceError(
            f"{shown} leaves no room for a prompt before max_new_tokens={budget}",
            [f"{raise_cap} or lower {lower}"],
        )
    from ragen_core.interfaces.env_pool import EnvRef, ResetRequest
    from ragen_core.rollout.env_pool import episode_label, reset_env

    env = registry.make_env(config.env, preset=config.preset, **config.env_config)
    if r.enforce_env_max_tokens and int(env.config.max_tokens) < budget:  # replies stop there: the prompt may use the rest
        budget, lower, reply = int(env.config.max_tokens), "env_config.max_tokens", "max_tokens"
    ref = EnvRef(name=config.env, preset=config.preset)
    try:  # an env that raises here is named with its preset and seed (EnvError), like in a rollout
        quirk = config.compat.prompt_merge_quirk  # the instruction the prompts will carry
        start = reset_env(env, ResetRequest(0, config.seed, prompt_merge_quirk=quirk), label=episode_label(ref, config.seed))
        text = start.instruction + "\n" + start.observation
        if config.test_freq > 0 or config.val_before_train:  # validation's first episode too: a split that cannot
            # start (a data file with nothing held out) fails here, not after a step whose work has no checkpoint yet
            reset_env(env, ResetRequest(0, config.seed_val, mode="val"), label=episode_label(ref, config.seed_val))
    finally:
        env.close()
    prompt_len = len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])  # no "longer than the maximum" warning
    if prompt_len + budget > r.max_model_len:
        hints = [f"{raise_cap} or lower {lower}"]
        if prompt_len + 64 > r.max_model_len:  # the env's own text leaves no room for a reply: that is what to change
            hints = [f"the instruction and first observation of env {config.env!r} alone take ~{prompt_len} tokens: make them shorter "
                     f"(its env_config, or the env's render) or {raise_cap}"]
        shown = f"rollout.max_model_len={r.max_model_len}" if cap == "rollout.max_model_len" else cap
        raise ResourceError(
            f"the first prompt of env {config.env!r} needs ~{prompt_len} tokens plus {reply}={budget}, more than {shown}", hints)
    import torch

    n_params = sum(p.numel() for p in model.parameters())
    first = next(model.parameters())
    half = first.dtype == torch.float16  # (only a LoRA run keeps float16 weights: its critic is float32)
    need = estimate_training_bytes(n_params, first.element_size(), needs_critic, needs_ref, lora=lora,
                                   critic_bytes_per_param=4 if half else None)
    have = available_memory_bytes(device)
    if have is not None and need > have:
        gib = 1024**3
        parts = ("frozen weights, LoRA adapters with grads and AdamW" if lora else "weights, grads, AdamW") + \
            (", critic" if needs_critic else "") + (", reference" if needs_ref and not lora else "")
        advice = ["use a smaller model"] + ([] if lora else ["enable LoRA (optim.peft.rank=16)"]) + \
            (["an algorithm without a critic (--algo grpo)"] if needs_critic else [])
        raise ResourceError(
            f"training {n_params / 1e6:.0f}M parameters needs ~{need / gib:.1f} GiB ({parts}) but only {have / gib:.1f} GiB is free "
            f"on {device}", [", ".join(advice[:-1]) + (" or " if len(advice) > 1 else "") + advice[-1]])


def model_source(config: RunConfig, run_dir: str | Path, checkpoint: str | Path | None) -> tuple[str, tuple[str, Path] | None]:
    """What to load before training: ``(model name or folder, LoRA resume source or None)``.

    A fresh run loads ``config.model``; a resumed full fine-tuning run the checkpoint folder; a
    resumed LoRA run the *original base* of its adapters (see :mod:`ragen_core.trainer.checkpoint`),
    returning ``(base reference, adapter folder)`` as the second item for :func:`wrap_lora`.

    Raises:
        CheckpointError: The run's ``checkpoints/lora_base`` differs from its manifest, or the
            local base folder of a LoRA run is gone.
    """
    from ragen_core.trainer.checkpoint import lora_resume_source, resolve_lora_base, verify_checkpoint

    if checkpoint is None:
        return config.model, None
    source = lora_resume_source(checkpoint) if config.optim.lora else None
    if source is None:
        return str(checkpoint), None
    base = resolve_lora_base(run_dir, source[0])
    if Path(base).is_dir():
        verify_checkpoint(base)
    elif Path(base).is_absolute():  # a local model folder (recorded as an absolute path) that was moved or deleted
        raise CheckpointError(f"cannot resume this LoRA run: its base model folder {base} is gone (the adapters in "
                              f"{Path(checkpoint).name}/{source[1].name} apply to it)",
                              [f"put the model folder back at {base}; the merged {Path(checkpoint).name} needs no base for "
                               "ragen eval, or as the model of a new run"])
    return base, source


def check_lora_targets(config: RunConfig, model: Any) -> None:
    """``optim.peft.target_modules`` must name modules the model has (peft's own matching: a list
    entry matches a module whose name is it or ends in ``.entry``; a string other than
    ``all-linear`` is a regular expression the whole name must match). Checked right after the
    model loads, before a warm start or anything written to the run folder.

    Raises:
        ConfigError: an entry (or the expression) that matches nothing, listing the linear layers.
    """
    import re

    peft_cfg = config.optim.peft
    if peft_cfg is None or not config.optim.lora or peft_cfg.target_modules == "all-linear":
        return
    import torch

    kinds: tuple[type, ...] = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d)
    try:
        from transformers.pytorch_utils import Conv1D

        kinds += (Conv1D,)
    except ImportError:  # an older transformers: the torch layers only
        pass
    # peft adapts these layer types only: a name matching an attention block fails inside peft
    layers = [(name, module) for name, module in model.named_modules() if name and isinstance(module, kinds)]
    names = [name for name, _ in layers]
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in layers if isinstance(module, torch.nn.Linear)})
    targets = peft_cfg.target_modules
    hints = [f"its linear layers: {', '.join(linear) or 'none'} (or optim.peft.target_modules=all-linear)"]
    if isinstance(targets, str):
        try:
            missing = [] if any(re.fullmatch(targets, name) for name in names) else [targets]
        except re.error as exc:
            raise ConfigError(f"optim.peft.target_modules={targets!r} is not a regular expression ({exc})",
                              [f"name modules as a list, e.g. [{', '.join(linear[:2])}], or use all-linear"]) from None
        hints.insert(0, f"a single string is a regular expression over the whole module name: write [{targets}] for layers of that "
                        f"name, or '.*{targets}'")
    else:
        missing = [t for t in targets if not any(name == t or name.endswith("." + t) for name in names)]
    if missing:
        raise ConfigError(f"optim.peft.target_modules: {', '.join(repr(m) for m in missing)} matches no layer LoRA can adapt "
                          f"(linear, embedding, convolution) in model {config.model!r}", hints)


def wrap_lora(config: RunConfig, model: Any, tokenizer: Any, run_dir: str | Path, resume_from: tuple[str, Path] | None = None,
              *, fresh_base: bool = True, write: bool = True) -> tuple[Any, str | None]:
    """Add LoRA adapters to ``model`` when ``optim.peft.rank > 0``; returns ``(model, base reference)``.

    ``resume_from`` = ``(base reference, adapter folder)`` of a checkpoint (``model`` is then that
    base): the saved adapter is loaded, trainable, instead of fresh ones. Otherwise fresh adapters
    are added; the base reference is the run's ``model`` name, or -- for a warm-started base or an
    old checkpoint without ``adapter/`` (``fresh_base=False``) -- ``checkpoints/lora_base``, written
    here once (``write=False``: only named, for the ranks of a data-parallel run other than 0).
    Without LoRA: ``(model, None)``.

    Raises:
        ConfigError: ``peft`` is not installed.
        CheckpointError: The adapter folder has no ``adapter_model.safetensors`` (adapters are
            read from safetensors only, never from a pickle).
    """
    peft_cfg = config.optim.peft
    if peft_cfg is None or not config.optim.lora:
        return model, None
    try:
        import peft
    except ImportError:
        raise ConfigError("optim.peft.rank > 0 needs the 'peft' package", ["pip install 'ragen-core[lora]'"]) from None
    from ragen_core.trainer.checkpoint import ADAPTER_WEIGHTS, LORA_BASE_DIR, save_lora_base

    if resume_from is not None:
        if not (resume_from[1] / ADAPTER_WEIGHTS).is_file():
            raise CheckpointError(f"LoRA adapter {resume_from[1]} has no {ADAPTER_WEIGHTS} (adapters are loaded from safetensors only)")
        with peft_quiet():
            return peft.PeftModel.from_pretrained(model, str(resume_from[1]), is_trainable=True), resume_from[0]

    if fresh_base and not hasattr(model, "ragen_warm_start"):
        base = config.model
    else:  # a warm-started base (or merged weights of an old checkpoint): keep it in the run folder
        if not fresh_base and write:
            print("resume: checkpoint has no adapter/ folder; new LoRA adapters start from its merged weights")
        base = save_lora_base(run_dir, model, tokenizer) if write else f"checkpoints/{LORA_BASE_DIR}"
    lora = peft.LoraConfig(r=peft_cfg.rank, lora_alpha=peft_cfg.alpha, target_modules=peft_cfg.target_modules, task_type="CAUSAL_LM")
    with peft_quiet():
        return peft.get_peft_model(model, lora), base


@contextlib.contextmanager
def peft_quiet() -> Iterator[None]:
    """Silence the FutureWarning peft itself triggers by reading transformers' deprecated
    ``is_gradient_checkpointing`` (peft 0.21 with transformers 5): not the user's to act on."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield
