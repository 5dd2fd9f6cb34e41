"""gitmctl: the command line over gitmd's gRPC API. Every verb prints a table, or JSON with --json."""
