"""BranchOPD: fork selection, branch rollouts from restored environment states, diagnostics."""
