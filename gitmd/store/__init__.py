"""The one SQLite store (WAL) through sqlite-utils: numbered migrations, telemetry, later the library."""
