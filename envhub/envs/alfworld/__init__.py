"""ALFWorld served through envhub: task sets (generated or official) and the environment."""
