"""The gRPC transport: server wiring, the thin servicer, message conversion, and what a client needs
besides the generated code: the token client (``client_auth``)."""
