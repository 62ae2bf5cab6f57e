"""Rollout layer: reply parsing, prompt rendering, env pools and the multi-turn rollout loop."""
