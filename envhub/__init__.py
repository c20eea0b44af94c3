"""envhub: gRPC environment servers with snapshot, fork and restore for LLM-agent training."""

__version__ = "0.1.0"
