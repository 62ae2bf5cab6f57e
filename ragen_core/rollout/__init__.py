"""Rollout layer: reply parsing, prompt rendering, env pools and the multi-turn rollout loop.

Light to import (no torch): ``parser``, ``prompts``, ``episodes``, ``env_pool``,
``process_pool``, ``layout``, ``runner`` and ``chat`` need only pydantic and a tokenizer object
handed in by the caller.

Public API:

* :func:`ragen_core.rollout.parser.parse_reply` -> :class:`~ragen_core.rollout.parser.ParsedReply`
* :class:`ragen_core.rollout.env_pool.LocalEnvPool` (pool ``local``),
  :class:`ragen_core.rollout.process_pool.ProcessEnvPool` (pool ``process``); the interface is
  :mod:`ragen_core.interfaces.env_pool`
* :mod:`ragen_core.rollout.episodes`: :class:`~ragen_core.rollout.episodes.SeedSchedule` and the
  turn rules (map actions, format penalty, action budget, end of episode)
* :class:`ragen_core.rollout.runner.RolloutRunner`, :class:`~ragen_core.rollout.runner.RolloutConfig`
* :func:`ragen_core.rollout.layout.episode_layout`, :func:`~ragen_core.rollout.layout.turn_samples`
* :class:`ragen_core.rollout.types.Turn`, :class:`~ragen_core.rollout.types.Trajectory`
"""
