"""Server-level benchmark (`envhub bench`): gRPC versus in-process, workers, restore depth, memory."""
