"""Tree rollouts from live forks (`rollout.strategy: tree`): docs/tree-rollouts.md."""
