"""The gRPC transport: server wiring, the thin servicer, and message conversion."""
