"""Generated protobuf and gRPC code (`make protos`); do not edit."""
