"""Developer tools (protocol code generation checks)."""
