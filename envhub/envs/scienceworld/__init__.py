"""ScienceWorld as an envhub environment kind (`envhub.envs.scienceworld.kind:ScienceWorldKind`)."""
