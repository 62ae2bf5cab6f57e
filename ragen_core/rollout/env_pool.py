"""The ``local`` env pool: env instances in this process (the default).

:class:`LocalEnvPool` keeps one env instance per episode-id slot, built lazily from the
:class:`~ragen_core.interfaces.env_pool.EnvRef` through the registry (or from an in-process
``env_factory``) the first time a reset uses that id. Slots are kept across resets, so one pool
serves train and validation rollouts of different sizes; instances are reused, never rebuilt,
except after a step timeout.

Stepping an episode (:func:`run_actions`, shared with the ``process`` pool's workers) executes
its actions in order, sums their rewards, stops at the first ``done``, says which actions ran and
keeps each one's values of the env's declared ``info_metrics`` keys (:func:`info_record`);
an empty action list executes nothing and returns ``env.render()``. An env that raises, returns
a reward that is not a finite number (``None``, a string, NaN), an observation that is not text
(``None`` would otherwise reach the model as the word "None"), an info that is not a dict or a
declared info-metric value that is not a finite number or a bool is a bug in the env:
:class:`~ragen_core.errors.EnvError` names the env, its preset, the seed and the member
(:func:`episode_label`).

Threads: the episodes of one turn step in ``threads`` threads (for envs whose ``step`` waits on a
server; default one, or 16 for envs whose spec sets ``async_step``). With a ``step_timeout_s`` every
step runs in a worker thread; an episode whose step is not back in time comes back with
``end_reason="timeout"`` and its env instance is abandoned -- the thread cannot be stopped, so
the instance is never touched again and its slot is rebuilt on the next reset. Like an episode
whose env said ``done``, it has ended: a further step for it is refused (:func:`check_steps`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from pydantic import Field

from ragen_core.config import short_repr
from ragen_core.errors import EnvError, RagenError, UsageError
from ragen_core.interfaces.env import Env, checked_info_metrics
from ragen_core.interfaces.env_pool import (
    EnvFacts,
    EnvPool,
    EnvPoolConfig,
    EnvRef,
    EpisodeStart,
    ResetRequest,
    StepOutcome,
    StepRequest,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Threads used for envs whose spec sets ``async_step`` when ``threads`` is not set.
ASYNC_STEP_THREADS = 16


def episode_label(env: EnvRef, seed: int, member: int = 0) -> str:
    """How errors name one episode's env: ``"env 'sokoban' preset 'CoordSokoban' (seed 3, member 1)"``."""
    preset = f" preset {env.preset!r}" if env.preset else ""
    return f"env {env.name!r}{preset} (seed {seed}, member {member})"


def episode_labels(env: EnvRef, requests: Iterable[ResetRequest]) -> dict[int, str]:
    """Episode id -> :func:`episode_label` of each of ``requests`` (how a pool's errors name them)."""
    return {r.episode_id: episode_label(env, r.seed, r.member) for r in requests}


def reset_slots(ref: EnvRef, envs: dict[int, Env], labels: dict[int, str], requests: Iterable[Mapping[str, Any]],
                build: Callable[[], Env]) -> list[dict[str, Any]]:
    """A pool worker's side of a reset (the process pool's workers, the Ray pool's actors): each
    request (a :class:`ResetRequest` as a dict) resets the env of its episode slot in ``envs``,
    built with ``build`` when the slot has none, and keeps its label in ``labels``. Returns the
    :class:`EpisodeStart` of each as a dict (what crosses the pipe or the wire; see
    :func:`episode_start_from_dict`)."""
    starts = []
    for data in requests:
        req = ResetRequest(**data)
        if req.episode_id not in envs:
            envs[req.episode_id] = build()
        labels[req.episode_id] = episode_label(ref, req.seed, req.member)
        starts.append(dataclasses.asdict(reset_env(envs[req.episode_id], req, label=labels[req.episode_id])))
    return starts


def episode_start_from_dict(data: Mapping[str, Any]) -> EpisodeStart:
    """The :class:`EpisodeStart` a worker sent as a dict (:func:`reset_slots`)."""
    facts = dict(data["facts"])
    if facts["action_names"] is not None:
        facts["action_names"] = tuple(facts["action_names"])
    return EpisodeStart(data["episode_id"], data["observation"], data["instruction"], EnvFacts(**facts))


def reset_timeout_error(env: EnvRef, requests: Sequence[ResetRequest], limit: float | None, where: str = "") -> str:
    """One line for ``requests`` not reset within ``reset_timeout_s`` (in the worker ``where``),
    naming the env and the first episode's seed (a worker resets its episodes in turn, so which
    one hung is not known) and the setting that raises the limit (a first reset that loads data
    or starts a service may need longer than a run's 600 s)."""
    first = episode_label(env, requests[0].seed, requests[0].member)
    more = f" and {len(requests) - 1} more episode{'s' if len(requests) > 2 else ''}" if len(requests) > 1 else ""
    return (f"{first}{more} did not reset within reset_timeout_s={limit:g}" + (f" in {where}" if where else "")
            + ": raise it (rollout.pool_config.reset_timeout_s in a run; null waits forever) if its resets load data or start a service")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class WorkerLogs(logging.Handler):
    """Warnings logged inside a pool's worker process, carried back to the trainer.

    A worker's warning (a restarted server, an env without ``info["success"]``) used to go to the
    worker's own stderr, glued to the end of the trainer's progress-bar line, and past any logging
    the trainer's process configured. :meth:`install` puts one of these on the worker's root logger
    (warnings and worse); the worker sends each record as it is logged through :attr:`forward`
    (the process pool's pipe, the Ray pool's queue), or without one :meth:`take`'s records along
    with every reply, and the pool passes them to :func:`replay_worker_logs` in the trainer's process.
    """

    _installed: WorkerLogs | None = None

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, str, str, str | None]] = []
        self.forward: Callable[[list[tuple[int, str, str, str | None]]], None] | None = None
        """When set (the process and Ray pools' workers), each record is sent at once through it instead
        of waiting for the next reply: a worker that dies before replying keeps what it logged."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = (record.levelno, record.name, record.getMessage(), getattr(record, ONCE, None))
            if self.forward is not None:
                self.forward([entry])
            else:
                self.records.append(entry)
        except Exception:  # noqa: BLE001 - logging's rule: a failing handler must not raise
            self.handleError(record)

    def take(self) -> list[tuple[int, str, str, str | None]]:
        """The records logged since the last call (level, logger name, message, once key), oldest first."""
        with self.lock:  # type: ignore[union-attr]  # Handler.createLock made it
            taken, self.records = self.records, []
        return taken

    @classmethod
    def install(cls) -> WorkerLogs:
        """This process's collector, put on the root logger the first time."""
        if cls._installed is None:
            cls._installed = cls()
            logging.getLogger().addHandler(cls._installed)
        return cls._installed


def check_resets(requests: Sequence[Any]) -> None:
    """Refuse a reset batch every pool would misread: an item that is not a :class:`ResetRequest`,
    or an episode id named twice.

    Raises:
        UsageError: naming the item or the episode.
    """
    _requests_of(requests, ResetRequest, "reset", "give each episode of a batch its own id")


def check_steps(requests: Sequence[Any], running: Container[int], ended: Mapping[int, tuple[str, str]] | None = None) -> None:
    """Refuse a step batch every pool would misread: an item that is not a :class:`StepRequest`,
    an episode named twice (one request per episode per turn: the local pool ran both, the
    process pool answered the second twice), one that has ``ended`` (an outcome said ``done`` or
    ended it ``"timeout"``/``"failed"``: its env was stepped again past its end), or one that is
    not ``running`` (never reset, or replaced by a later reset). ``ended`` is what
    :func:`note_ended` kept: one lookup per request.

    Raises:
        UsageError: naming the item or the episode (for an ended one: env, seed, member and how it ended).
    """
    _requests_of(requests, StepRequest, "step", "send one StepRequest per episode per turn, its actions together")
    for r in requests:
        if ended and r.episode_id in ended:
            label, how = ended[r.episode_id]
            raise UsageError(f"{label}, episode {r.episode_id}, has ended ({how}) and cannot be stepped again",
                             ["step only the episodes whose last outcome has done=False and no end_reason; reset to start new ones"])
        if r.episode_id not in running:
            raise UsageError(f"episode {r.episode_id} is not running in this pool (reset it first)")


def note_ended(ended: dict[int, tuple[str, str]], outcomes: Iterable[StepOutcome], label: Callable[[int], str]) -> None:
    """Keep in ``ended`` each episode one of ``outcomes`` ended (``done``, or ``end_reason``
    ``"timeout"``/``"failed"``) for :func:`check_steps`, as ``(label(episode_id), how)``: the
    :func:`episode_label` naming its env, and ``"done"``, ``"timeout"`` or ``"failed"``."""
    for out in outcomes:
        how = "done" if out.done else out.end_reason
        if how:
            ended[out.episode_id] = (label(out.episode_id), how)


def _requests_of(requests: Sequence[Any], kind: type, call: str, once: str) -> None:
    """``requests`` is a list of ``kind`` naming each episode once (``once`` says how)."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
        raise UsageError(f"pool.{call}() takes a list of {kind.__name__}, not {type(requests).__name__}")
    seen: set[int] = set()
    for item in requests:
        if not isinstance(item, kind):
            hint = f"build it as {kind.__name__}(**item)" if isinstance(item, Mapping) else ""
            raise UsageError(f"pool.{call}() takes {kind.__name__} objects, not {type(item).__name__} {short_repr(item)}", [hint])
        if item.episode_id in seen:  # type: ignore[attr-defined]  # both request kinds have it
            raise UsageError(f"episode {item.episode_id} appears twice in one {call} request: {once}")  # type: ignore[attr-defined]
        seen.add(item.episode_id)  # type: ignore[attr-defined]


ONCE = "ragen_once"
"""``extra={ONCE: key}`` on a warning meant once per process (an env class without ``info["success"]``):
each worker process says it once, and :func:`replay_worker_logs` passes on the first worker's only."""

_REPLAYED_ONCE: set[str] = set()
"""Once keys of worker warnings this process has logged."""


def replay_worker_logs(records: Sequence[Sequence[Any]], where: str) -> None:
    """Log a worker's :meth:`WorkerLogs.take` records here, each under its own logger, prefixed with
    ``where`` (``"process pool worker 2 (pid 812)"``): above the progress bar, or wherever this
    process's logging sends warnings. A record with a once key another worker's record already
    brought is left out (eight workers said one env's warning eight times)."""
    for level, name, message, *rest in records:
        once = rest[0] if rest else None
        if once is not None:
            if once in _REPLAYED_ONCE:
                continue
            _REPLAYED_ONCE.add(once)
        logging.getLogger(name).log(int(level), "%s: %s", where, message, extra={ONCE: once} if once is not None else None)


def _observation(value: Any, label: str, what: str) -> str:
    if not isinstance(value, str):
        raise EnvError(f"{label} returned an observation of type {type(value).__name__} ({short_repr(value, 60)}) {what}",
                       hints=["observations are the text the model reads: return a str"])
    return value


_SAID_NO_SUCCESS: set[str] = set()
"""Env classes this process has warned about ending episodes without ``info["success"]``."""


def _say_no_success(env: Any, label: str) -> None:
    """Once per env class and process: an episode ended (``done``) with no ``info["success"]``, so
    ``train/success`` counts it as a failure whatever the env meant."""
    kind = f"{type(env).__module__}.{type(env).__qualname__}"
    if kind in _SAID_NO_SUCCESS:
        return
    _SAID_NO_SUCCESS.add(kind)
    log.warning("%s ended an episode (done=True) with no info['success']: train/success counts such episodes as failures; "
                "report info['success']=True/False on the last step (said once per env class)", label, extra={ONCE: f"no-success {kind}"})


def is_bool(value: Any) -> bool:
    """A Python bool or numpy's (what ``done`` and ``info["success"]`` may be)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def _flag(value: Any, name: str, label: str, what: str) -> bool:
    """``done`` or ``info["success"]`` as a bool (:func:`is_bool`); anything else (the string
    ``"no"``, which is truthy, or 1) is refused rather than read by its truth value."""
    if is_bool(value):
        return bool(value)
    raise EnvError(f"{label} returned {name} {short_repr(value, 40)} of type {type(value).__name__} {what}",
                   hints=[f"{name} must be True or False" + (" (train/success counts episodes whose info['success'] is True)"
                                                              if name != "done" else "")])


def _reward(value: Any, label: str, what: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise EnvError(f"{label} returned a reward of type {type(value).__name__} ({short_repr(value, 60)}) {what}",
                       hints=["rewards must be numbers (int or float)"])
    reward = float(value)
    if not math.isfinite(reward):
        raise EnvError(f"{label} returned a non-finite reward {value!r} {what}")
    return reward


def _finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int past a float's range
        return False


def info_record(info: Mapping[str, Any], keys: Iterable[str], label: str, what: str) -> dict[str, float]:
    """The values ``info`` gives for the declared info-metric ``keys``, as floats (a bool, numpy's
    too, as 1.0/0.0); a key ``info`` lacks is left out, not read as 0.

    Raises:
        EnvError: a value that is not a finite number or a bool, naming the env, the key and the value.
    """
    record: dict[str, float] = {}
    for key in keys:
        if key not in info:
            continue
        value = info[key]
        if is_bool(value):
            record[key] = float(bool(value))
        elif isinstance(value, numbers.Real) and _finite(value):
            record[key] = float(value)
        else:
            raise EnvError(f"{label} returned info[{key!r}] = {short_repr(value, 60)} of type {type(value).__name__} {what}: "
                           "a key declared in info_metrics takes a finite number or a bool",
                           hints=[f"report a number for {key!r}, leave the key out of this step's info, or drop it from the env's info_metrics"])
    return record


def run_actions(env: Any, episode_id: int, actions: Sequence[str], *, label: str) -> StepOutcome:
    """Execute ``actions`` in order in ``env``; stop at the first ``done``.

    ``label`` names the episode in errors (:func:`episode_label`). Each executed action adds its
    :func:`info_record` of the env's declared ``info_metrics`` keys to the outcome's ``info_records``.

    Raises:
        EnvError: the env raised, or returned a reward that is not a finite number, an
            observation that is not a str, an info that is not a dict, or a declared
            info-metric value that is not a finite number or a bool.
    """
    if not actions:
        try:
            rendered = env.render()
        except Exception as exc:
            raise EnvError(f"{label} raised in render(): {_first_line(exc)}") from exc
        return StepOutcome(episode_id, observation=_observation(rendered, label, "from render()"))
    observation, reward, done, executed = "", 0.0, False, []
    info: Mapping[str, Any] = {}
    declared = [key for key, _ in checked_info_metrics(env)]
    records: list[dict[str, float]] = []
    for action in actions:
        what = f"for action {short_repr(action, 60)}"
        try:
            result = env.step(action)
        except RagenError as exc:  # said on purpose (a server that stopped answering): keep its own hints
            kind = "" if isinstance(exc, EnvError) else f"{type(exc).__name__}: "  # no "EnvError: EnvError:"
            raise EnvError(f"{label} failed on action {short_repr(action, 60)}: {kind}{exc.message}", exc.hints) from exc
        except Exception as exc:
            raise EnvError(
                f"{label} raised on action {short_repr(action, 60)}: {_first_line(exc)}",
                hints=["a step that raises ends the run: fix the env's step ('ragen -v' shows the traceback); an invalid or "
                       "unknown action is reported through info['action_is_valid'], never an exception"],
            ) from exc
        if not isinstance(result, (tuple, list)) or len(result) != 4:  # a StepResult is a 4-tuple (a list of 4 unpacks too)
            size = f" of {len(result)}" if isinstance(result, (tuple, list)) else ""
            raise EnvError(f"{label} returned a {type(result).__name__}{size} ({short_repr(result, 60)}) from step() {what}",
                           hints=["step must return (observation, reward, done, info): a StepResult or a 4-tuple"])
        observation, r, done, info = result
        observation = _observation(observation, label, what)
        reward += _reward(r, label, what)
        if not isinstance(info, Mapping):
            raise EnvError(f"{label} returned an info of type {type(info).__name__} {what}", hints=["info must be a dict (may be empty)"])
        done = _flag(done, "done", label, what)
        if "success" in info:
            info = {**info, "success": _flag(info["success"], "info['success']", label, what)}
        records.append(info_record(info, declared, label, what))
        executed.append(action)
        if done:
            if "success" not in info:
                _say_no_success(env, label)
            break
    return StepOutcome(episode_id, observation=observation, reward=reward, done=done, info=dict(info), executed=executed,
                       info_records=records)


def _instruction(env: Any, merge_quirk: bool) -> Any:
    """``env.instruction()``, or with ``merge_quirk`` its ``merge_quirk_instruction()`` (an env that
    is not an :class:`~ragen_core.interfaces.env.Env` and lacks it: its instruction)."""
    if merge_quirk:
        return getattr(env, "merge_quirk_instruction", env.instruction)()
    return env.instruction()


def reset_env(env: Any, request: ResetRequest, *, label: str) -> EpisodeStart:
    """Reset ``env`` for ``request`` and describe the start (its instruction: the merge-quirk one
    when ``request.prompt_merge_quirk``).

    Raises:
        EnvError: the env raised while resetting, or its first observation is not a str.
    """
    try:
        observation = env.reset(request.seed, member=request.member, mode=request.mode)
        instruction = _instruction(env, request.prompt_merge_quirk)
        facts = EnvFacts.of(env)
    except RagenError as exc:  # said on purpose (a bad data file, a missing server): keep its hints
        kind = "" if isinstance(exc, EnvError) else f"{type(exc).__name__}: "  # no "EnvError: EnvError:"
        raise EnvError(f"{label} failed to reset: {kind}{exc.message}", exc.hints) from exc
    except Exception as exc:
        raise EnvError(f"{label} failed to reset: {_first_line(exc)}") from exc
    return EpisodeStart(request.episode_id, _observation(observation, label, "from reset()"), str(instruction), facts)


TIMED_OUT = object()
"""Result of a call that did not return within its deadline (see :func:`call_all`)."""


def call_all(calls: Sequence[Callable[[], T]], threads: int, timeout_s: float | None, *, stop_on_error: bool = False) -> list[Any]:
    """Run ``calls`` in ``threads`` daemon threads; each result, raised exception or :data:`TIMED_OUT`.

    Each call gets ``timeout_s`` from the moment a thread starts it (waiting in the queue does not
    count). A call past its deadline is given up: its thread is left to finish on its own (a
    daemon thread never blocks interpreter exit) and a fresh thread takes over the queue.
    ``stop_on_error``: once a call raises, calls not started yet are not started (their results
    stay :data:`TIMED_OUT`); the running ones are waited for. A caller that re-raises the error
    then fails after one wave of calls, not after all of them (a server that stopped answering
    costs one request timeout, not one per episode).
    """
    results: list[Any] = [TIMED_OUT] * len(calls)
    pending = deque(range(len(calls)))
    running: dict[int, float] = {}
    """Call index -> when its thread started it."""
    cond = threading.Condition()

    def worker() -> None:
        while True:
            with cond:
                if not pending:
                    return
                i = pending.popleft()
                running[i] = time.monotonic()
                cond.notify_all()
            try:
                value: Any = calls[i]()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, which re-raises it
                value = exc
            with cond:
                if i not in running:  # given up: a replacement thread owns the queue now
                    return
                del running[i]
                results[i] = value
                if stop_on_error and isinstance(value, BaseException):
                    pending.clear()
                cond.notify_all()

    def start() -> None:
        threading.Thread(target=worker, name="ragen-env", daemon=True).start()

    for _ in range(min(threads, len(calls))):
        start()
    with cond:
        while pending or running:
            wait = None
            if timeout_s is not None:
                now = time.monotonic()
                for i, started in list(running.items()):
                    if now - started >= timeout_s:
                        del running[i]  # results[i] stays TIMED_OUT
                        if pending:
                            start()
                if not (pending or running):
                    break  # the last call timed out: no thread will notify again
                wait = min(running.values()) + timeout_s - now if running else None
            cond.wait(timeout=wait)
    return results


class LocalPoolConfig(EnvPoolConfig):
    """Settings of the ``local`` pool."""

    threads: int | None = Field(default=None, ge=1)
    """Threads stepping the episodes of one turn concurrently (for envs whose ``step`` waits on a
    server); None = 1, or 16 when the env's spec sets ``async_step``."""


class LocalEnvPool(EnvPool):
    """Env instances in this process, one per episode-id slot (see the module docstring).

    Args:
        env: The env to build (name, config overrides, preset, or an import-string factory).
        config: Pool settings (:class:`LocalPoolConfig`).
        env_factory: Builds an env instance in-process instead of ``env`` (notebooks, tests,
            the warm start's recording wrapper); ``env.name`` then only labels errors.
    """

    config_class = LocalPoolConfig
    config: LocalPoolConfig

    def __init__(
        self,
        env: EnvRef,
        config: EnvPoolConfig | None = None,
        *,
        env_factory: Callable[[], Env] | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(env, config, **overrides)
        self.env_factory = env_factory
        self._envs: dict[int, Env] = {}
        """Episode-id slot -> env instance (kept across resets)."""
        self._labels: dict[int, str] = {}
        """Live episode id -> how errors name it (env, seed, member)."""
        self._ended: dict[int, tuple[str, str]] = {}
        """Episode id -> (label, how) of each episode an outcome ended (done, or its step timed out):
        a step for it is refused (:func:`check_steps`)."""
        self._threads: int | None = None

    @property
    def threads(self) -> int:
        """Threads stepping one turn (``config.threads``, or from the env spec's ``async_step``)."""
        if self._threads is None:
            self._threads = self.config.threads or self._default_threads()
        return self._threads

    def _default_threads(self) -> int:
        if self.env_factory is not None or self.env.factory is not None:
            return 1
        from ragen_core import registry

        return ASYNC_STEP_THREADS if getattr(registry.get_spec("env", self.env.name), "async_step", False) else 1

    def _build(self) -> Env:
        return self.env_factory() if self.env_factory is not None else self.env.build()

    def _run(self, calls: Sequence[Callable[[], T]], timeout_s: float | None) -> list[Any]:
        if timeout_s is None and self.threads == 1:
            return [call() for call in calls]  # in the calling thread: exceptions propagate as is
        results = call_all(calls, self.threads, timeout_s, stop_on_error=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    # ------------------------------------------------------------------ reset
    def reset(self, requests: list[ResetRequest]) -> list[EpisodeStart]:
        check_resets(requests)
        self._labels, self._ended = episode_labels(self.env, requests), {}
        for r in requests:
            if r.episode_id not in self._envs:
                self._envs[r.episode_id] = self._build()
        starts = self._run([partial(self._reset_one, r) for r in requests], self.config.reset_timeout_s)
        for r, start in zip(requests, starts):
            if start is TIMED_OUT:
                self._abandon(r.episode_id)
                raise EnvError(reset_timeout_error(self.env, [r], self.config.reset_timeout_s))
        return starts

    # ------------------------------------------------------------------- step
    def step(self, requests: list[StepRequest]) -> list[StepOutcome]:
        check_steps(requests, self._labels, self._ended)
        ran = self._run([partial(self._step_one, r) for r in requests], self.config.step_timeout_s)
        outcomes: list[StepOutcome] = []
        for r, out in zip(requests, ran):
            if out is TIMED_OUT:
                label = self._labels[r.episode_id]
                self._abandon(r.episode_id)
                error = f"{label} did not finish its step within step_timeout_s={self.config.step_timeout_s}; instance abandoned"
                self._ended[r.episode_id] = (label, "timeout")
                outcomes.append(StepOutcome(r.episode_id, observation="", end_reason="timeout", error=error))
            else:
                outcomes.append(out)
                note_ended(self._ended, (out,), self._labels.__getitem__)
        return outcomes

    def _reset_one(self, r: ResetRequest) -> EpisodeStart:
        return reset_env(self._envs[r.episode_id], r, label=self._labels[r.episode_id])

    def _step_one(self, r: StepRequest) -> StepOutcome:
        return run_actions(self._envs[r.episode_id], r.episode_id, r.actions, label=self._labels[r.episode_id])

    def instance(self, episode_id: int) -> Env:
        """The env instance of a live episode (for tests and debugging; local pool only)."""
        return self._envs[episode_id]

    def _abandon(self, episode_id: int) -> None:
        """Forget a stuck instance (its thread may still run): the slot is rebuilt on the next reset."""
        self._envs.pop(episode_id, None)
        self._labels.pop(episode_id, None)

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        envs, self._envs, self._labels, self._ended = self._envs, {}, {}, {}
        for env in envs.values():
            env.close()
