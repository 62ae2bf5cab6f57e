"""One module per plugin interface: env, advantage, algorithm, rollout_filter, diagnostic, engine."""
