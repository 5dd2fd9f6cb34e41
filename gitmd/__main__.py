"""gitmd's command line: read the config, apply overrides, run the daemon in the foreground."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from gitmd import __version__, config, logs
from gitmd.errors import ConfigError, GitmdError


def build_parser() -> argparse.ArgumentParser:
    """gitmd's argument parser (tools/manpages.py documents it: gitmd(8))."""
    p = argparse.ArgumentParser(
        prog="gitmd",
        description="gitmd: the host daemon that owns this host's GPUs (telemetry, capture, tuning).",
    )
    p.add_argument(
        "--config", type=Path, help=f"TOML config file (default {config.DEFAULT_CONFIG_PATH} if present)"
    )
    p.add_argument(
        "--prefix", type=Path, help="keep all state and runtime files under this folder (e.g. ./var)"
    )
    p.add_argument("--socket", type=Path, help="Unix socket path (overrides daemon.socket)")
    p.add_argument("--state-dir", type=Path, help="state directory (overrides daemon.state_dir)")
    p.add_argument("--runtime-dir", type=Path, help="runtime directory (overrides daemon.runtime_dir)")
    p.add_argument(
        "--backend", choices=config.BACKENDS, help="telemetry backend (overrides telemetry.backend)"
    )
    p.add_argument("--metrics-port", type=int, help="Prometheus port, 0 = off (overrides metrics.port)")
    p.add_argument("--log-level", choices=config.LOG_LEVELS, help="overrides daemon.log_level")
    p.add_argument("--check-config", action="store_true", help="validate the config, print it, and exit")
    p.add_argument("--version", action="version", version=f"gitmd {__version__}")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_config(args: argparse.Namespace) -> config.Config:
    cfg = config.load(args.config)
    if args.prefix:
        cfg = cfg.relocated(args.prefix)
    d = cfg.daemon
    d = dataclasses.replace(
        d,
        socket=args.socket.absolute() if args.socket else d.socket,
        state_dir=args.state_dir.absolute() if args.state_dir else d.state_dir,
        runtime_dir=args.runtime_dir.absolute() if args.runtime_dir else d.runtime_dir,
        log_level=args.log_level or d.log_level,
    )
    t = dataclasses.replace(cfg.telemetry, backend=args.backend or cfg.telemetry.backend)
    m = cfg.metrics
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port must be 0..65535, got {args.metrics_port}")
        m = dataclasses.replace(m, port=args.metrics_port)
    return dataclasses.replace(cfg, daemon=d, telemetry=t, metrics=m)


# gitmd does no heavy linear algebra: one BLAS/OpenMP thread, not a pool (with its buffers) per core.
_SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def main(argv: list[str] | None = None) -> int:
    for var in _SINGLE_THREADED:  # before anything imports numpy
        os.environ.setdefault(var, "1")
    # sqlite-utils imports pandas at import time when it is installed (and pandas pulls in pyarrow):
    # tens of MB the daemon never uses. Seen on the GPU host, whose Python has pandas.
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]
    args = parse_args(argv)
    try:
        cfg = build_config(args)
    except ConfigError as e:
        print(f"gitmd: configuration error: {e}", file=sys.stderr)
        return 2
    if args.check_config:
        print(cfg.toml(), end="")  # valid TOML: gitmd reads it back unchanged
        return 0
    logs.setup(cfg.daemon.log_level)
    from gitmd.daemon import Daemon

    try:
        return Daemon(cfg, reload=lambda: build_config(args)).run_forever()
    except GitmdError as e:
        print(f"gitmd: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
