"""Env-pool conformance checks: the contract of :mod:`ragen_core.interfaces.env_pool`.

Every pool implementation (``local``, ``process``, a Ray or HTTP pool in its own distribution)
runs the same checks::

    from ragen_core.testing.pool_checks import POOL_CHECKS, check_pool

    def make(env, step_timeout_s):
        return MyPool(env, step_timeout_s=step_timeout_s)

    @pytest.mark.parametrize("name", sorted(POOL_CHECKS))
    def test_my_pool(name):
        POOL_CHECKS[name](make)

``make(env, step_timeout_s)`` builds a fresh pool of ``env``; each check closes what it builds.
The env is the slow corridor (:class:`~ragen_core.testing.toy_env.SlowCorridorEnv`), given by
import string (``EnvRef.factory``), so pools in other processes can build it too. Expected values
come from the same env built in this process: a pool must behave exactly like the plain env.

A pool whose workers hold several episodes each may, on a timeout, fail the worker's other
unanswered episodes as well; build such a pool for :func:`check_timeout_fails_only_slow_episode`
with one episode per worker (the check uses two episodes).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from ragen_core.interfaces.env import checked_info_metrics
from ragen_core.interfaces.env_pool import EnvPool, EnvRef, ResetRequest, StepOutcome, StepRequest
from ragen_core.rollout.env_pool import info_record
from ragen_core.testing.toy_env import (
    MARKED_TOY_FACTORY,
    SCORED_TOY_FACTORY,
    SLOW_TOY_FACTORY,
    TOY_MARK_VARIABLE,
    UNSAID_TOY_FACTORY,
    UnsaidCorridorEnv,
)

DOC = "see the contract in ragen_core/interfaces/env_pool.py"

SLEEP_S = 5.0
"""How long the toy env's ``Wait`` blocks: far above :data:`TIMEOUT_S`, so a pool that waits for
it instead of timing out is caught by the elapsed time."""
TIMEOUT_S = 1.5
"""The step timeout of the timeout checks: the other episodes' instant steps (an IPC round trip in a
process or Ray pool) must finish within it even on a loaded 2-core machine, and SLEEP_S stays 3x above it."""

#: The env every check runs: a 7-cell corridor with a blocking ``Wait`` action.
TOY = EnvRef(name="toy-slow-corridor", factory=SLOW_TOY_FACTORY, config={"length": 7, "sleep_s": SLEEP_S})

#: An env that never reports ``info["success"]`` (two cells: one move ends an episode).
UNSAID = EnvRef(name="unsaid", factory=UNSAID_TOY_FACTORY, config={"length": 2})

#: An env whose instruction ends with the value of :data:`~ragen_core.testing.toy_env.TOY_MARK_VARIABLE` where it runs.
MARKED = EnvRef(name="marked", factory=MARKED_TOY_FACTORY, config={"length": 2})

#: An env declaring info metrics (``distance``: mean, ``moved``: sum), reported by valid moves only.
SCORED = EnvRef(name="scored", factory=SCORED_TOY_FACTORY, config={"length": 7})

MakePool = Callable[[EnvRef, "float | None"], EnvPool]


def _requests(groups: int, size: int, base: int = 100, mode: str = "train") -> list[ResetRequest]:
    return [ResetRequest(g * size + m, base + g, m, mode) for g in range(groups) for m in range(size)]


def _reference(request: ResetRequest, ref: EnvRef = TOY) -> Any:
    """The same env built and reset in this process."""
    env = ref.build()
    env.reset(request.seed, member=request.member, mode=request.mode)
    return env


def _expected(env: Any, episode_id: int, actions: list[str]) -> StepOutcome:
    """What stepping ``actions`` in a plain env gives (the contract a pool must reproduce)."""
    if not actions:
        return StepOutcome(episode_id, env.render())
    reward, executed, records = 0.0, [], []
    declared = [key for key, _ in checked_info_metrics(env)]
    for action in actions:
        obs, r, done, info = env.step(action)
        reward += r
        executed.append(action)
        records.append(info_record(info, declared, "", ""))
        if done:
            break
    return StepOutcome(episode_id, obs, reward, done, dict(info), executed, info_records=records)


def _same(got: StepOutcome, want: StepOutcome, what: str) -> None:
    fields = ("episode_id", "observation", "reward", "done", "info", "executed", "end_reason", "error", "info_records")
    diff = [f"{f}: {getattr(got, f)!r} != {getattr(want, f)!r}" for f in fields if getattr(got, f) != getattr(want, f)]
    assert not diff, f"{what}: " + "; ".join(diff) + f" ({DOC})"


def check_reset_determinism(make: MakePool) -> None:
    """A reset gives the plain env's observation, instruction and facts, again on every reset."""
    requests = _requests(3, 1) + [ResetRequest(3, 100, 0, "val")]
    with make(TOY, None) as pool:
        first = pool.reset(requests)
        again = pool.reset(requests)
    with make(TOY, None) as other:
        fresh = other.reset(requests)
    assert [s.episode_id for s in first] == [r.episode_id for r in requests], f"starts must come in request order ({DOC})"
    for r, a, b, c in zip(requests, first, again, fresh):
        env = _reference(r)
        assert a.observation == env.render(), f"episode {r.episode_id}: observation {a.observation!r} != the env's {env.render()!r}"
        assert a.instruction == env.instruction() and a.facts.action_names == ("Left", "Right", "Wait")
        assert (a.observation, a.instruction, a.facts) == (b.observation, b.instruction, b.facts) == (c.observation, c.instruction, c.facts), (
            f"episode {r.episode_id}: the same seed reset differently ({DOC})"
        )


def check_reset_passes_the_merge_quirk(make: MakePool) -> None:
    """A request's ``prompt_merge_quirk`` reaches the env: its start carries the env's
    ``merge_quirk_instruction()`` (the run's ``compat.prompt_merge_quirk``), the others its ``instruction()``."""
    requests = [ResetRequest(0, 100, 0), ResetRequest(1, 100, 1, prompt_merge_quirk=True)]
    with make(TOY, None) as pool:
        starts = pool.reset(requests)
    env = _reference(requests[0])
    want = [env.instruction(), env.merge_quirk_instruction()]
    assert [s.instruction for s in starts] == want, (
        f"instructions {[s.instruction for s in starts]!r} != {want!r}: pass each ResetRequest on whole, "
        f"prompt_merge_quirk included ({DOC})")


def check_group_members_share_first_observation(make: MakePool) -> None:
    """Members of a group (same seed, own member index) start from the same observation."""
    with make(TOY, None) as pool:
        starts = pool.reset(_requests(2, 3, base=40))
    assert len({s.observation for s in starts[:3]}) == 1 and len({s.observation for s in starts[3:]}) == 1, [s.observation for s in starts]


def check_many_episodes_in_one_step(make: MakePool) -> None:
    """One ``step`` call moves every requested episode exactly like its own plain env."""
    requests = _requests(4, 2)
    envs = {r.episode_id: _reference(r) for r in requests}
    with make(TOY, None) as pool:
        pool.reset(requests)
        for turn in range(3):
            plan = {r.episode_id: [["Right"], ["Left", "Right"], ["Left"]][(r.episode_id + turn) % 3] for r in requests}
            live = [r for r in requests if envs[r.episode_id].player != envs[r.episode_id].goal]
            outcomes = pool.step([StepRequest(r.episode_id, tuple(plan[r.episode_id])) for r in live])
            assert len(outcomes) == len(live), f"one outcome per request ({DOC})"
            for r, got in zip(live, outcomes):
                _same(got, _expected(envs[r.episode_id], r.episode_id, plan[r.episode_id]), f"turn {turn}, episode {r.episode_id}")


def check_empty_actions_render(make: MakePool) -> None:
    """An empty action list executes nothing and returns the env's current rendering, reward 0."""
    (request,) = _requests(1, 1, base=9)  # "Left" does not end it: an ended episode is not stepped again
    env = _reference(request)
    with make(TOY, None) as pool:
        pool.reset([request])
        _same(pool.step([StepRequest(0, ("Left",))])[0], _expected(env, 0, ["Left"]), "first step")
        got = pool.step([StepRequest(0, ())])[0]
    _same(got, StepOutcome(0, env.render()), "empty action list")


def check_done_stops_remaining_actions(make: MakePool) -> None:
    """Actions after the one that ends the episode are not executed."""
    (request,) = _requests(1, 1, base=11)
    env = _reference(request)
    solution = env.oracle_actions()
    with make(TOY, None) as pool:
        pool.reset([request])
        got = pool.step([StepRequest(0, (*solution, "Left", "Right"))])[0]
    assert got.done and got.executed == solution and got.info.get("success") is True, f"{got} ({DOC})"
    assert got.reward == 1.0  # one goal reward: the extra actions did not run


def check_outcomes_in_request_order(make: MakePool) -> None:
    """Outcomes follow the order of the step requests, not of the episode ids or the workers."""
    requests = _requests(3, 2)
    order = [4, 1, 5, 0, 3]
    with make(TOY, None) as pool:
        pool.reset(requests)
        outcomes = pool.step([StepRequest(e, ("Right",)) for e in order])
    assert [o.episode_id for o in outcomes] == order, f"outcomes {[o.episode_id for o in outcomes]} for requests {order} ({DOC})"


def check_close_idempotent(make: MakePool) -> None:
    """``close`` may be called twice (and on a pool that never ran)."""
    pool = make(TOY, None)
    pool.reset(_requests(2, 1))
    pool.close()
    pool.close()
    make(TOY, None).close()


def check_timeout_fails_only_slow_episode(make: MakePool) -> None:
    """A step past ``step_timeout_s`` fails that episode (``"timeout"``), which is then refused a
    further step; the others go on; a reset recovers."""
    requests = _requests(2, 1, base=21)
    fast = _reference(requests[1])
    with make(TOY, TIMEOUT_S) as pool:
        pool.reset(requests)
        started = time.monotonic()
        slow_out, fast_out = pool.step([StepRequest(0, ("Wait",)), StepRequest(1, ("Right",))])
        elapsed = time.monotonic() - started
        assert elapsed < SLEEP_S, f"step waited {elapsed:.1f} s for a step that should time out after {TIMEOUT_S} s ({DOC})"
        assert slow_out.end_reason == "timeout" and slow_out.error and "\n" not in slow_out.error, f"{slow_out} ({DOC})"
        _same(fast_out, _expected(fast, 1, ["Right"]), "the fast episode")
        _refused(lambda: pool.step([StepRequest(1, ("Left",)), StepRequest(0, ("Right",))]),
                 "env 'toy-slow-corridor' (seed 21, member 0), episode 0, has ended (timeout)", "a step for the timed-out episode 0")
        _same(pool.step([StepRequest(1, ("Left",))])[0], _expected(fast, 1, ["Left"]), "the fast episode, next turn")
        starts = pool.reset(requests)
        assert starts[0].observation == _reference(requests[0]).render(), "the timed-out episode's slot must work after a reset"
        env = _reference(requests[0])
        _same(pool.step([StepRequest(0, ("Right",))])[0], _expected(env, 0, ["Right"]), "the rebuilt episode")


def check_one_request_per_episode(make: MakePool) -> None:
    """A step batch naming an episode twice is refused (UsageError), not run twice or answered twice."""
    requests = _requests(1, 1, base=5)
    with make(TOY, None) as pool:
        pool.reset(requests)
        _refused(lambda: pool.step([StepRequest(0, ("Right",)), StepRequest(0, ("Left",))]), "episode 0 appears twice",
                 "a step batch naming episode 0 twice")


def check_refuses_what_it_cannot_run(make: MakePool) -> None:
    """A caller's mistake is a one-line :class:`~ragen_core.errors.UsageError` before anything runs, the
    same from every pool: a step for an episode that is not running, a dict instead of a request, one
    reset batch naming an episode twice. The pool still works afterwards."""
    requests = _requests(1, 2, base=5)
    with make(TOY, None) as pool:
        _refused(lambda: pool.reset([{"episode_id": 0, "seed": 5}]), "takes ResetRequest objects, not dict",  # type: ignore[list-item]
                 "a reset given a dict")
        _refused(lambda: pool.reset([requests[0], requests[0]]), "episode 0 appears twice", "a reset batch naming episode 0 twice")
        pool.reset(requests)
        _refused(lambda: pool.step([StepRequest(7, ("Right",))]), "episode 7 is not running", "a step for episode 7, never reset")
        _refused(lambda: pool.step([{"episode_id": 0, "actions": ["Right"]}]), "takes StepRequest objects, not dict",  # type: ignore[list-item]
                 "a step given a dict")
        env = _reference(requests[0])
        _same(pool.step([StepRequest(0, ("Right",))])[0], _expected(env, 0, ["Right"]), "a step after the refused calls")


def check_refuses_ended_episodes(make: MakePool) -> None:
    """A step for an episode that has ended (an outcome said ``done``) is a one-line
    :class:`~ragen_core.errors.UsageError` naming its env, seed and member, before anything runs:
    an env is never stepped past its end, and the batch's other episodes are not stepped either.
    They go on afterwards, and the next reset makes the episode steppable again."""
    requests = _requests(1, 2, base=13)
    envs = {r.episode_id: _reference(r) for r in requests}
    solution = envs[0].oracle_actions()
    with make(TOY, None) as pool:
        pool.reset(requests)
        finished, going = pool.step([StepRequest(0, tuple(solution)), StepRequest(1, ("Left",))])
        _same(finished, _expected(envs[0], 0, solution), "the episode that ends")
        _same(going, _expected(envs[1], 1, ["Left"]), "the episode that goes on")
        said = "env 'toy-slow-corridor' (seed 13, member 0), episode 0, has ended (done)"
        _refused(lambda: pool.step([StepRequest(1, ("Right",)), StepRequest(0, ("Left",))]), said, "a step for episode 0 after its done")
        _refused(lambda: pool.step([StepRequest(0, ())]), said, "an empty step for episode 0 after its done")
        _same(pool.step([StepRequest(1, ("Right",))])[0], _expected(envs[1], 1, ["Right"]), "the other episode after the refused steps")
        pool.reset(requests)
        _same(pool.step([StepRequest(0, ("Left",))])[0], _expected(_reference(requests[0]), 0, ["Left"]), "episode 0 after a new reset")


def _refused(call: Callable[[], object], words: str, what: str) -> None:
    from ragen_core.errors import UsageError

    try:
        call()
    except UsageError as exc:
        assert words in str(exc), f"{what}: the error must say {words!r}, got {exc} ({DOC})"
    except Exception as exc:  # the author's pool raised something else: say what was expected
        raise AssertionError(f"{what} must raise ragen_core.UsageError ({words!r}; ragen_core.rollout.env_pool.check_resets / "
                             f"check_steps do it), not {type(exc).__name__}: {exc} ({DOC})") from exc
    else:
        raise AssertionError(f"{what} was accepted ({DOC})")


def check_env_warnings_reach_this_process(make: MakePool) -> str:
    """A warning logged where the env runs (here: an episode that ended without ``info["success"]``)
    is logged once in this process, under the logger that logged it; a pool whose envs run in other
    processes carries it back with their replies (:class:`~ragen_core.rollout.env_pool.WorkerLogs`) and
    may prefix it with the worker. Returns the message as logged here."""
    from ragen_core.rollout import env_pool

    kind = f"{UnsaidCorridorEnv.__module__}.{UnsaidCorridorEnv.__qualname__}"
    env_pool._SAID_NO_SUCCESS.discard(kind)  # once per process
    env_pool._REPLAYED_ONCE.discard(f"no-success {kind}")
    said, logger = env_pool.WorkerLogs(), logging.getLogger(env_pool.__name__)  # a collector of warnings, here in this process
    logger.addHandler(said)
    try:
        with make(UNSAID, None) as pool:  # two episodes: in two workers of a pool that has them, each saying it once
            starts = pool.reset([ResetRequest(0, 5, 0), ResetRequest(1, 6, 0)])
            moves = [StepRequest(s.episode_id, ("Right" if s.observation == "PG" else "Left",)) for s in starts]  # one move ends it
            assert all(out.done for out in pool.step(moves)), f"the episodes must end ({DOC})"
    finally:
        logger.removeHandler(said)
    messages = [message for _, _, message, _ in said.take()]
    found = [m for m in messages if re.search(r"env 'unsaid' \(seed [56], member 0\) ended an episode \(done=True\) with no info\['success'\]", m)]
    assert len(found) == 1, f"the env's warning must be logged once in the trainer's process, got {messages} ({DOC})"
    return found[0]


def check_run_variables_reach_the_envs(make: MakePool) -> None:
    """A run variable (``RAGEN_RUN_*``) set in this process before the pool is built is set where
    its envs run, with this process's value, also where workers do not inherit this process's
    environment (Ray actors on other machines: DeepCoder's once-per-run sandbox line came once more
    from each)."""
    value = f"{os.getpid()}-{time.time_ns()}"  # no worker could have it from an earlier run
    before = os.environ.get(TOY_MARK_VARIABLE)
    os.environ[TOY_MARK_VARIABLE] = value
    try:
        with make(MARKED, None) as pool:  # two episodes: in two workers of a pool that has them
            starts = pool.reset([ResetRequest(0, 1, 0), ResetRequest(1, 2, 0)])
    finally:
        if before is None:
            del os.environ[TOY_MARK_VARIABLE]
        else:
            os.environ[TOY_MARK_VARIABLE] = before
    marks = [s.instruction.rpartition("Mark: ")[2] for s in starts]
    assert marks == [value, value], f"{TOY_MARK_VARIABLE}={value!r} here, but the envs saw {marks} ({DOC})"


def check_info_records_travel(make: MakePool) -> None:
    """The env's declared info metrics reach the runner: the declaration in the facts, one record per
    executed action of plain floats (a bool as 1.0/0.0), a key the action's info lacked left out."""
    requests = _requests(2, 1, base=21)
    envs = {r.episode_id: _reference(r, SCORED) for r in requests}
    with make(SCORED, None) as pool:
        starts = pool.reset(requests)
        assert all(s.facts.info_metrics == (("distance", "mean"), ("moved", "sum")) for s in starts), (
            f"facts.info_metrics must carry the env's declaration, got {[s.facts.info_metrics for s in starts]} ({DOC})")
        actions = ["Jump", "Left", "Right"]  # "Jump" is an invalid move: its info reports neither key
        outcomes = pool.step([StepRequest(r.episode_id, tuple(actions)) for r in requests])
    for r, got in zip(requests, outcomes):
        want = _expected(envs[r.episode_id], r.episode_id, actions)
        _same(got, want, f"episode {r.episode_id} of an env with info_metrics")
        assert got.info_records[0] == {} and all(type(v) is float for rec in got.info_records for v in rec.values()), (
            f"info_records must be plain floats, a missing key absent: {got.info_records} ({DOC})")


POOL_CHECKS: dict[str, Callable[[MakePool], object]] = {
    "reset-determinism": check_reset_determinism,
    "reset-passes-the-merge-quirk": check_reset_passes_the_merge_quirk,
    "group-members-share-first-observation": check_group_members_share_first_observation,
    "many-episodes-in-one-step": check_many_episodes_in_one_step,
    "empty-actions-render": check_empty_actions_render,
    "done-stops-remaining-actions": check_done_stops_remaining_actions,
    "outcomes-in-request-order": check_outcomes_in_request_order,
    "close-idempotent": check_close_idempotent,
    "timeout-fails-only-slow-episode": check_timeout_fails_only_slow_episode,
    "one-request-per-episode": check_one_request_per_episode,
    "refuses-what-it-cannot-run": check_refuses_what_it_cannot_run,
    "refuses-ended-episodes": check_refuses_ended_episodes,
    "env-warnings-reach-this-process": check_env_warnings_reach_this_process,
    "run-variables-reach-the-envs": check_run_variables_reach_the_envs,
    "info-records-travel": check_info_records_travel,
}


def check_pool(make: MakePool, *, skip: tuple[str, ...] = ()) -> None:
    """Run every pool check against pools built by ``make(env, step_timeout_s)``."""
    for name, check in POOL_CHECKS.items():
        if name not in skip:
            check(make)
