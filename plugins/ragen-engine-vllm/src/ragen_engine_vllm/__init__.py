"""The vLLM rollout engine for RAGEN (see README.md)."""
