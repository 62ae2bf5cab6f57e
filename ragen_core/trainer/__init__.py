"""StarPO trainer: rollout -> diagnostics -> filter -> advantages -> update -> checkpoint."""
