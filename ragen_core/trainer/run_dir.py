"""The run directory: one run per folder, and a ``config.yaml`` that is read and written whole.

* A run without ``run_dir`` gets ``runs/<env>-<algo>-<YYYYmmdd-HHMMSS>-<4 hex digits>``, created
  with a plain ``mkdir`` (no ``exist_ok``) and a fresh suffix when the name is taken, so two runs
  started in the same second never share a folder.
* A fresh run refuses a folder that holds anything (it would mix two runs: appended metrics, a
  replaced ``config.yaml``, pruned checkpoints). ``overwrite`` removes what a run writes there
  (:data:`RUN_ENTRIES`) and keeps other files, saying which.
* ``config.yaml`` of a fresh run is created exclusively, the last claim on the folder before any
  metrics: of two runs started into one folder at once, the second stops there. A resumed run
  replaces it atomically. ``--resume`` refuses a ``config.yaml`` that is missing, unreadable,
  empty or names no env (a resume would otherwise continue with defaults and overwrite it).
* A resume continues the run's own experiment: another env, preset, algorithm or model is refused
  (:data:`RESUME_FIXED`); any other setting that differs from ``config.yaml`` is printed and recorded
  in ``config_changes.jsonl`` (the step it applies from, old and new values) before ``config.yaml``
  is replaced, so the folder still says what every step ran with.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ragen_core.errors import ConfigError, shell_word

CONFIG_FILE = "config.yaml"

RUN_ENTRIES = ("config.yaml", "config_changes.jsonl", "metrics.jsonl", "plugins.json", "versions.json", "warm_start.json", "checkpoints",
               "rollouts", "plots", "tensorboard", "wandb", "grad_analysis", "diagnostics.html", "diagnostics_offline.jsonl",
               "watchdog-stacks.txt")
"""What ``ragen run`` (and ``ragen plot`` / ``ragen diagnose``) write into a run directory."""

CHANGES_FILE = "config_changes.jsonl"

RESUME_FIXED = ("env", "preset", "algo", "model", "seed", "seed_val", "optim.peft")
"""Settings that say what a run trains: a resume refuses to change them (that is a new run). The
seeds: the checkpoint carries the run's seed schedule and RNG states, which a new seed would not
reach (it was recorded as changed while the run went on with the old one). ``optim.peft`` (any of
its settings): the checkpoint's adapters and optimiser state have the run's LoRA shape."""

RESUME_QUIET = ("steps", "run_dir", "progress")
"""Top-level settings a resume changes as a matter of course (not recorded)."""

PROMPT_TEXT_SETTINGS = ("rollout.enforce_env_max_tokens", "rollout.enable_think", "compat.prompt_merge_quirk", "compat.retokenized_text")
"""Settings that change the text of the prompts the policy is shown (the stated reply budget, the
answer format, the instruction, the history's text): a resume that changes one says so beyond
the change record (turning ``enforce_env_max_tokens`` on mid-run took success from 0.25 to 0.03)."""


def _suffix() -> str:
    return secrets.token_hex(2)


def _plain(name: str) -> str:
    """A plugin name as a folder-name part: ``dist:name`` (a chosen duplicate) becomes ``name``."""
    return str(name).rpartition(":")[2]


def default_run_dir(config: Any, root: str | Path = "runs") -> Path:
    """A free folder name ``<root>/<env>-<algo>-<time>-<suffix>`` (never an existing one), not
    created: the trainer creates it when set-up starts, so a Trainer built and dropped leaves nothing."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        path = Path(root) / f"{_plain(config.env)}-{_plain(config.algo)}-{stamp}-{_suffix()}"
        if not os.path.lexists(path):
            return path
    raise ConfigError(f"could not create a new run directory under {root}: 100 names were taken", ["pass --run-dir"])


class RunDirLock:
    """This process trains in ``run_dir``: an exclusive ``flock`` on the folder itself (no lock
    file to leave behind or to race on), released by :meth:`release` or when the process ends,
    however it ends. Two ``ragen run --resume`` of one folder both trained, writing the same steps
    twice into one ``metrics.jsonl``; the second is now refused. Not on systems without ``fcntl``.

    A child forked while the lock is held (a vLLM engine or a process pool started with fork) closes
    its copy of the descriptor at once: a flock lives while any copy is open, so the child would
    otherwise keep the folder locked after this process released it or ended.
    """

    _held: weakref.WeakSet[RunDirLock] = weakref.WeakSet()

    def __init__(self, run_dir: Path) -> None:
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # no flock here (Windows): unguarded, as before
            return
        fd = os.open(run_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # a file system without flock (some NFS): unguarded
                return
            raise ConfigError(f"run directory {run_dir} is in use by another ragen process (a run or a resume of it that is still going)",
                              ["wait for it to finish (or stop it), or choose another --run-dir"]) from None
        self._fd = fd
        RunDirLock._held.add(self)

    @classmethod
    def _forget_in_child(cls) -> None:
        for lock in list(cls._held):
            fd, lock._fd = lock._fd, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        cls._held.clear()

    def release(self) -> None:
        """Let other processes train here again. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock
        RunDirLock._held.discard(self)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RunDirLock._forget_in_child)


def claim_run_dir(run_dir: Path, *, overwrite: bool = False, log: Any = print) -> None:
    """Make ``run_dir`` an empty folder for a fresh run.

    Raises:
        ConfigError: ``run_dir`` holds files and ``overwrite`` is off, or is not a folder.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} is a file", ["choose another --run-dir"])
    entries = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if entries and not overwrite:
        shown = ", ".join(entries[:4]) + (f", ... ({len(entries)} entries)" if len(entries) > 4 else "")
        checkpoints = run_dir / "checkpoints"
        if checkpoints.is_dir() and any(p.name.startswith("step_") for p in checkpoints.iterdir()):
            hint = (f"continue that run with 'ragen run --resume {shell_word(run_dir)}', choose another --run-dir, or pass --overwrite "
                    "to replace it (from Python: Trainer(config, resume=True) or Trainer(config, overwrite=True))")
        else:  # nothing to resume from: --resume would refuse it
            hint = ("it holds no checkpoint to resume from: pass --overwrite to start it again (Trainer(config, overwrite=True)), "
                    "or choose another --run-dir")
        raise ConfigError(f"run directory {run_dir} is not empty ({shown})", [hint])
    if entries:
        ours = set(RUN_ENTRIES) | {f"{name}.tmp" for name in RUN_ENTRIES}
        removed = [name for name in entries if name in ours]
        for name in removed:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        kept = [name for name in entries if name not in ours]
        log(f"overwrite: removed {', '.join(removed) or 'nothing'} from {run_dir}"
            + (f"; kept {', '.join(kept)} (not written by a run)" if kept else ""))
    run_dir.mkdir(parents=True, exist_ok=True)


def write_run_config(run_dir: Path, config: Any, *, fresh: bool) -> None:
    """Write the resolved config as ``run_dir/config.yaml``.

    Args:
        fresh: Create the file exclusively (a fresh run); otherwise replace it atomically (a resume).

    Raises:
        ConfigError: ``fresh`` and another run wrote ``config.yaml`` since :func:`claim_run_dir`.
    """
    import yaml

    text = yaml.safe_dump(_resolved(config), sort_keys=False)  # every plugin's settings filled in (their defaults may change)
    path = run_dir / CONFIG_FILE
    if fresh:
        try:
            with path.open("x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            raise ConfigError(f"another run started in {run_dir} at the same time (it wrote {CONFIG_FILE} first)",
                              ["give each run its own --run-dir"]) from None
        return
    replace_text(path, text)


def replace_text(path: Path, text: str) -> None:
    """Write ``text`` as ``path`` under a temporary name (``<name>.tmp``) and rename it over
    ``path``: a process killed meanwhile leaves the old file (or none), never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The settings of ``run_dir/config.yaml`` for ``--resume`` (unvalidated).

    Raises:
        ConfigError: The file is missing, unreadable, malformed, empty or names no env.
    """
    from ragen_core.config import read_yaml

    path = run_dir / CONFIG_FILE
    hint = "--resume needs the config.yaml that 'ragen run' wrote into the run directory; restore it, or start a new run"
    if run_dir.is_file():
        raise ConfigError(f"--resume: {run_dir} is a file, not a run directory",
                          ["pass the run directory that contains config.yaml and checkpoints/"])
    if not path.is_file():
        here = run_dir.absolute()  # 'step_4' given from inside checkpoints/: its relative parents end at '.'
        run = next((p.parent for p in (here, *here.parents) if p.name == "checkpoints"), None)
        if run is not None and (run / CONFIG_FILE).is_file():  # RUN/checkpoints/step_4 given: its run resumes from its newest one
            raise ConfigError(f"--resume: {run_dir} is inside the run directory {run}, not a run directory itself",
                              [f"pass the run directory: ragen run --resume {shell_word(run)} (it continues from its newest intact checkpoint)"])
        raise ConfigError(f"--resume: {path} not found", ["pass the run directory that contains config.yaml and checkpoints/"])
    try:
        path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--resume: cannot read {path} ({type(exc).__name__})", [hint]) from None
    data = read_yaml(path)
    if not data:
        raise ConfigError(f"--resume: {path} is empty", [hint])
    if "env" not in data:
        raise ConfigError(f"--resume: {path} names no env, so it is not a run's config", [hint])
    return data


class _NotSet:
    """The side of a change where a setting does not exist (not an explicit null)."""

    def __repr__(self) -> str:
        return "(not set)"


NOT_SET: Any = _NotSet()
"""Old or new value in :func:`resume_changes` of a setting one side does not have (a setting of a
plugin the resumed run no longer uses, or of a newly chosen one)."""


def resume_changes(previous: dict[str, Any], config: Any) -> dict[str, list[Any]]:
    """``{dotted key: [old, new]}`` for every setting ``config`` changes from the run's ``previous``
    one; :data:`NOT_SET` stands for a side that does not have the setting at all.

    Raises:
        ConfigError: ``config`` changes one of :data:`RESUME_FIXED`: the checkpoint's weights,
            optimiser state, seed schedule and the rows of ``metrics.jsonl`` belong to the run's own
            env, algorithm, model and seeds, and continuing them under another would mix two experiments.
    """
    try:
        before = _flat(_resolved(type(config).model_validate(previous)))
    except ValueError:  # an older config.yaml the current schema does not take: compare what it says
        before = _flat(previous)
    after = _flat(_resolved(config))
    from ragen_core.trainer.config import plain_preset

    for key in RESUME_FIXED:
        if key == "preset" and plain_preset(str(after.get("env")), before.get(key)) == plain_preset(str(after.get("env")), after.get(key)):
            continue  # naming a preset that changes nothing (or dropping it) is no change
        was, now = _section(before, key), _section(after, key)
        if (key in before or was is not None) and was != now:
            def said(value: Any, key: str = key) -> str:
                if isinstance(value, dict):  # a section (optim.peft): its settings
                    return f"{key} ({', '.join(f'{k}={v!r}' for k, v in value.items())})"
                return f"{key} {value!r}" if value is not None else f"no {key}"

            raise ConfigError(f"--resume: this run trains {said(was)}; continuing it with {said(now)} "
                              "would mix two experiments in one run directory",
                              [f"start a new run for {said(now)} (drop --resume), or resume without changing {key}"])
    keys = sorted(set(before) | set(after))
    changes = {k: [before.get(k, NOT_SET), after.get(k, NOT_SET)] for k in keys
               if before.get(k, NOT_SET) != after.get(k, NOT_SET) and k.split(".")[0] not in RESUME_QUIET}
    # an empty section on one side whose settings appear on the other ({} -> its fields) is no change of its own
    # another plugin chosen (rollout.pool 'process' -> 'ray'): the settings only the new one has come
    # with the choice ("rollout.pool_config.address (not set) -> None" listed defaults no one set);
    # the old one's own settings stay listed, as removed
    switched = tuple(settings_key + "." for name_key, _, settings_key in PLUGIN_SETTINGS if name_key in changes)
    return {k: v for k, v in changes.items() if not (NOT_SET in (v[0], v[1]) and {} in (v[0], v[1]))
            and not (v[0] is NOT_SET and k.startswith(switched))}


#: ``(plugin name key, preset key or None, its settings key)``: when a later config layer (flags,
#: overrides) picks another plugin or preset than an earlier one (the run's config.yaml on a resume,
#: a ``--config`` file, a recipe) names, the earlier layer's settings for it are dropped: they belong
#: to the plugin before (and a resolved config.yaml spells out all of them, defaults included, which
#: would also override a newly chosen preset).
PLUGIN_SETTINGS = (("env", "preset", "env_config"), ("algo", "algo_preset", "algo_config"),
                   ("algo_config.estimator", "algo_config.estimator_preset", "algo_config.estimator_config"),
                   ("filter", "filter_preset", "filter_config"), ("engine", None, "engine_config"),
                   ("rollout.pool", None, "rollout.pool_config"))


def stale_plugin_settings(previous: dict[str, Any], config: Any) -> list[tuple[str, str]]:
    """``[(settings key, why)]`` for plugin settings of an earlier config layer ``previous`` that
    belong to a plugin (or preset) ``config`` no longer uses: another env, algorithm, estimator,
    filter, engine or env pool, another preset of one of them, a diagnostic no longer listed. Only
    a plugin or preset that ``previous`` names itself counts (a file that sets ``filter_config``
    alone sets it for whichever filter is chosen)."""
    from ragen_core.trainer.config import plain_preset

    given = _flat(previous)
    after = _flat(config.model_dump(mode="json"))
    out: list[tuple[str, str]] = []
    dropped: list[str] = []
    for name_key, preset_key, settings_key in PLUGIN_SETTINGS:
        if not any(k.startswith(settings_key + ".") for k in given) or any(settings_key.startswith(d + ".") for d in dropped):
            continue  # nothing set for it, or dropped with its parent already
        for key in filter(None, (name_key, preset_key)):
            if key == "preset" and plain_preset(str(after.get("env")), given.get(key)) == plain_preset(str(after.get("env")), after.get(key)):
                continue  # naming an env preset that changes nothing (Bandit's "Bandit") keeps the settings, as a resume does
            if key in given and given[key] != after.get(key):
                out.append((settings_key, f"{key} changed from {given[key]!r} to {after.get(key)!r}"))
                dropped.append(settings_key)
                break
    saved = previous.get("diagnostics_config")
    listed = previous.get("diagnostics") or []
    for name in saved if isinstance(saved, dict) else ():
        if name in listed and name not in config.diagnostics:
            out.append((f"diagnostics_config.{name}", f"diagnostics no longer lists {name!r}"))
    return out


def without_settings(previous: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """A copy of ``previous`` without the dotted ``keys``."""
    import copy

    out = copy.deepcopy(previous)
    for key in keys:
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def _resolved(config: Any) -> dict[str, Any]:
    """``config`` with every plugin's settings filled in (as config.yaml holds them), else as given
    (a plugin that is missing or refuses its settings: reported by the plugin checks after this)."""
    from ragen_core.errors import RagenError
    from ragen_core.trainer.config import resolved_config

    try:
        return resolved_config(config)
    except (RagenError, ValueError):
        return dict(config.model_dump(mode="json"))


def record_resume_changes(run_dir: Path, changes: dict[str, list[Any]], from_step: int) -> str:
    """Append ``changes`` to ``config_changes.jsonl``; returns the line to print (``""`` when none),
    and a second one when a change is one of :data:`PROMPT_TEXT_SETTINGS`.

    A row holds ``changed`` (``{key: [old, new]}``), and, when there are any, ``removed``
    (``{key: old}``: settings the resumed run no longer has, such as a replaced plugin's) and
    ``added`` (``{key: new}``), so an explicit ``null`` stays distinct from a setting that is gone."""
    import json

    if not changes:
        return ""
    row: dict[str, Any] = {"from_step": from_step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "changed": {k: v for k, v in changes.items() if v[0] is not NOT_SET and v[1] is not NOT_SET}}
    removed = {k: old for k, (old, new) in changes.items() if new is NOT_SET}
    added = {k: new for k, (old, new) in changes.items() if old is NOT_SET}
    row.update({"removed": removed} if removed else {})
    row.update({"added": added} if added else {})
    with (run_dir / CHANGES_FILE).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=str) + "\n")
    # settings both sides have first (what was typed, mostly), then those of a plugin added or dropped
    ordered = sorted(changes.items(), key=lambda kv: NOT_SET in kv[1])
    shown = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in ordered[:8])
    more = f" and {len(changes) - 8} more" if len(changes) > 8 else ""
    line = f"resume: settings changed from the run's config.yaml from step {from_step} on: {shown}{more} (recorded in {CHANGES_FILE})"
    prompt = [k for k in PROMPT_TEXT_SETTINGS if k in changes]
    if prompt:
        line += (f"\nresume: {', '.join(prompt)} {'changes' if len(prompt) == 1 else 'change'} the prompts' text: the policy was "
                 "trained on other prompts, so expect its success to drop at first (resume without the change to keep them)")
    return line


def _section(flat: dict[str, Any], key: str) -> Any:
    """The value of ``key`` in a :func:`_flat` dict, or its section's settings as a dict (``optim.peft``
    -> ``{"rank": 8, ...}``); None when it has neither."""
    if key in flat:
        return flat[key]
    inner = {k[len(key) + 1:]: v for k, v in flat.items() if k.startswith(key + ".")}
    return inner or None


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-5}}`` -> ``{"optim.lr": 1e-5}``."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def record_versions(path: Path, versions: dict[str, Any], from_step: int) -> None:
    """Keep ``versions`` (:func:`ragen_core.distributions.software_versions`) in ``path``
    (``versions.json``): a list of ``{"from_step": N, ...}`` records, oldest first. A resume on other
    software appends one from the step it trains first; on the same software nothing changes. An
    unreadable file is started again."""
    records: list[dict[str, Any]] = []
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        records = [r for r in old if isinstance(r, dict)] if isinstance(old, list) else []
    except (OSError, ValueError):
        pass
    # records from steps a resume from an older checkpoint trains again go first, then one from
    # from_step unless the record before it names this software (its steps continue)
    kept = [r for r in records if not isinstance(r.get("from_step"), int) or r["from_step"] < from_step]
    if not (kept and {k: v for k, v in kept[-1].items() if k != "from_step"} == versions):
        kept.append({"from_step": from_step, **versions})
    if kept == records:
        return
    replace_text(path, json.dumps(kept, indent=2) + "\n")


ROLLOUTS_DIR = "rollouts"
"""``save_rollouts``: ``rollouts/step_<N>.jsonl``, one ``Trajectory.to_dict()`` per line, written at each step's rollout."""

_ROLLOUTS_FILE = re.compile(r"^step_(\d+)\.jsonl(\.tmp)?$")


def write_rollouts(run_dir: Path, step: int, lines: Iterable[str]) -> Path:
    """Write ``rollouts/step_<step>.jsonl`` from ``lines`` (each ending in a newline) atomically: a
    temp file renamed, so a process killed meanwhile leaves no half file under the step's name."""
    out = run_dir / ROLLOUTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"step_{step}.jsonl"
    replace_text(path, "".join(lines))
    return path


def remove_rollouts_after(run_dir: Path, step: int, checkpoint: str) -> str:
    """Remove the rollouts files of steps after ``step + 1`` (``step``: the checkpoint a resume
    continues from), and temp files of a write cut short after ``step``: a run killed after later
    steps' rollouts were saved left files no checkpoint's weights sampled. ``step + 1``'s whole
    file stays: checkpoint ``step``'s weights sampled it (``ragen diagnose --checkpoint`` reads it),
    and a resume that saves rollouts writes it again. Returns the line to print (``""`` when there
    was none)."""
    out = run_dir / ROLLOUTS_DIR
    found = []
    for path in out.iterdir() if out.is_dir() else ():
        match = _ROLLOUTS_FILE.match(path.name)
        if match and path.is_file() and int(match.group(1)) > step + (0 if path.name.endswith(".tmp") else 1):
            found.append((int(match.group(1)), path))
    if not found:
        return ""
    for _, path in found:
        path.unlink()
    names = ", ".join(path.name for _, path in sorted(found))
    return f"resume: removed {ROLLOUTS_DIR}/{names} (steps after checkpoints/{checkpoint}, which the run continues from)"
