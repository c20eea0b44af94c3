"""envhub trainer: rollouts over gRPC, objectives, learner, Ray workers."""
