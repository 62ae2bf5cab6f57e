"""The distributions this project ships, and the install hints built from them.

An install hint must name a distribution that exists. Every such hint about a
plugin or a plugin command is built here from one table, :data:`PLUGINS` (kind -> plugin name ->
distribution), and :data:`COMMANDS`; ``tests/test_install_hints.py`` checks both against the
entry points that this repository's ``pyproject.toml`` files declare, so a renamed or new plugin
fails a test until the table follows.

:data:`DEFAULTS` are the plugin distributions that ``ragen-core`` depends on: the default
algorithm (``grpo``) and the default no-op filter (``none``), so ``pip install ragen-core
ragen-env-X`` is enough for ``ragen run --env X``. They are still separate distributions found
through their entry points; ragen_core imports neither.
"""

from __future__ import annotations

CORE = "ragen-core"

#: Installed with ragen-core (its dependencies in pyproject.toml), each replaceable.
DEFAULTS: tuple[str, ...] = ("ragen-algo-grpo", "ragen-filters")

#: kind -> plugin name (aliases included) -> the distribution of this project that provides it.
#: The core's own engines and env pools (``hf``, ``local``, ``process``) are not listed.
PLUGINS: dict[str, dict[str, str]] = {
    "env": {
        "bandit": "ragen-env-bandit",
        "countdown": "ragen-env-countdown",
        "deepcoder": "ragen-env-deepcoder",
        "frozenlake": "ragen-env-frozenlake",
        "lean": "ragen-env-lean",
        "metamathqa": "ragen-env-metamathqa",
        "searchqa": "ragen-env-searchqa",
        "sokoban": "ragen-env-sokoban",
        "sudoku": "ragen-env-sudoku",
        "webshop": "ragen-env-webshop",
    },
    "algorithm": {
        "grpo": "ragen-algo-grpo",
        "drgrpo": "ragen-algo-grpo",
        "dapo": "ragen-algo-grpo",
        "ppo": "ragen-algo-ppo",
    },
    "estimator": {
        "grpo": "ragen-algo-grpo",
        "drgrpo": "ragen-algo-grpo",
        "rloo": "ragen-algo-grpo",
        "reinforce-plus-plus": "ragen-algo-grpo",
        "reinforce-plus-plus-baseline": "ragen-algo-grpo",
        "gae": "ragen-algo-ppo",
        "bilevel-gae": "ragen-algo-ppo",
    },
    "filter": {
        name: "ragen-filters"
        for name in ("none", "snr-topp", "snr-topp-softmax", "snr-topk", "snr-topk-abs", "snr-minp", "snr-soft", "reference",
                     "top-p", "top-k", "top-k-abs", "min-p")
    },
    "diagnostic": {"collapse": "ragen-diagnostics"},
    "pool": {"ray": "ragen-workers-ray"},
    "engine": {"vllm": "ragen-engine-vllm"},
}

#: ``ragen`` subcommands that plugin distributions of this project add.
COMMANDS: dict[str, str] = {"diagnose": "ragen-diagnostics"}

#: Every distribution of this project (the core and its plugins).
ALL_DISTRIBUTIONS: frozenset[str] = frozenset({CORE, *DEFAULTS, *COMMANDS.values(), *(d for names in PLUGINS.values() for d in names.values())})


def distribution_of(kind: str, name: str) -> str | None:
    """The distribution of this project that provides plugin ``kind``/``name``, or ``None``."""
    return PLUGINS.get(kind, {}).get(name)


def install_hint(kind: str, name: str) -> str:
    """One hint for a plugin that is not installed: the distribution to install, or the ones that exist.

    A name this project ships gets the install command of its distribution; any other name gets the
    distributions of this project that provide plugins of that kind (a third-party plugin's
    distribution name cannot be guessed), or ``ragen plugins`` for kinds only the core provides.
    """
    dist = distribution_of(kind, name)
    if dist is not None:
        note = " (a dependency of ragen-core: it was removed or disabled)" if dist in DEFAULTS else ""
        return f"{kind} {name!r} is in the {dist} distribution: pip install {dist}" + note
    dists = sorted(set(PLUGINS.get(kind, {}).values()))
    if not dists:
        return f"'ragen plugins --kind {kind}' lists the {kind}s installed here"
    listing = "; ".join(f"{d} ({', '.join(n for n, x in PLUGINS[kind].items() if x == d)})" for d in dists)
    return f"{kind}s of this project: {listing}; a third-party {kind} names its own distribution"


def command_hint(command: str) -> str:
    """The hint for a ``ragen`` subcommand whose distribution is missing."""
    dist = COMMANDS[command]
    return f"pip install {dist}   (in this repository: pip install --no-build-isolation -e plugins/{dist})"


def source_commit() -> str | None:
    """``HEAD`` of the git checkout ragen_core is imported from, with ``+dirty`` when tracked files
    differ from it; None for an installed copy (a wheel in site-packages, even one inside a checkout's
    virtual environment) or without git. It reads the checkout only: ``git status`` would rewrite
    the index, and a ``git commit`` there at that moment failed on ``index.lock``."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "--no-optional-locks", *args], capture_output=True, text=True, timeout=10, cwd=root, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return None
    head = git("rev-parse", "HEAD")
    if not head:
        return None
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


#: Distributions whose versions a run records (``versions.json``), when installed.
RECORDED: tuple[str, ...] = (CORE, "torch", "transformers", "peft", "vllm", "ray", "pydantic", "numpy", "safetensors")


def software_versions() -> dict[str, str | None]:
    """What a run ran on, beside its plugins' versions: Python, the platform, the installed
    versions of :data:`RECORDED` (those not installed are left out), torch's CUDA build, and the
    commit of a ragen_core checkout (:func:`source_commit`)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in RECORDED:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
    except ImportError:
        pass
    out["ragen_core_commit"] = source_commit()
    return out

