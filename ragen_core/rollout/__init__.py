"""Rollout layer: reply parsing, prompt rendering, env pools and the multi-turn rollout loop.

Light to import (no torch): ``parser``, ``prompts``, ``env_pool``, ``layout``, ``runner`` and
``chat`` need only pydantic and a tokenizer object handed in by the caller.

Public API:

* :func:`ragen_core.rollout.parser.parse_reply` -> :class:`~ragen_core.rollout.parser.ParsedReply`
* :class:`ragen_core.rollout.env_pool.EnvPool`, :class:`~ragen_core.rollout.env_pool.SeedSchedule`
* :class:`ragen_core.rollout.runner.RolloutRunner`, :class:`~ragen_core.rollout.runner.RolloutConfig`
* :func:`ragen_core.rollout.layout.episode_layout`, :func:`~ragen_core.rollout.layout.turn_samples`
* :class:`ragen_core.rollout.types.Turn`, :class:`~ragen_core.rollout.types.Trajectory`
"""
