"""gitmctl's entry point: global options, one subcommand per verb, errors as messages + exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _version() -> str:
    """gitmctl's version: the gitmd package's it ships in (read from the package itself, not
    importlib.metadata, whose import cost every gitmctl call 44 ms: `gitmctl run` is on every job's
    launch path)."""
    from gitmd import __version__

    return __version__


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """gitmctl's parser with every verb, or with ``only`` that one (`gitmctl run`'s fast path)."""
    from gitmctl.commands import modules

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output (proto3 JSON mapping)",
    )
    common.add_argument(
        "--socket",
        type=Path,
        default=argparse.SUPPRESS,
        help="gitmd's Unix socket (default $GITMD_SOCKET or /run/gitmd/gitmd.sock)",
    )
    common.add_argument(
        "--timeout", type=float, default=argparse.SUPPRESS, help="seconds to wait for an answer"
    )
    p = argparse.ArgumentParser(
        prog="gitmctl",
        parents=[common],
        description="Control and inspect gitmd, the GPU tuning daemon.",
        epilog="Exit codes: 0 ok, 1 error, 2 bad usage or argument, 3 gitmd not reachable, 4 not found, "
        "5 permission denied.",
    )
    p.add_argument("--version", action="version", version=f"gitmctl {_version()}")
    sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    handlers: dict[str, object] = {}
    for verb in modules(only):
        verb.register(sub, common)
        handlers[verb.NAME] = verb
        for other in getattr(verb, "ALSO", ()):  # a module with a second verb (pause / resume)
            handlers[other] = verb
    return p, handlers


def _verb(argv: list[str]) -> str:
    """The verb named on the command line ("" if none): the first word that is neither an option
    nor the value of --socket or --timeout."""
    words = iter(argv)
    for w in words:
        if w in ("--socket", "--timeout"):
            next(words, None)
        elif not w.startswith("-"):
            return w
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, handlers = build_parser("run" if _verb(argv) == "run" else None)
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    from gitmctl.errors import ClientError, default_socket

    socket_path = getattr(args, "socket", None) or default_socket()
    if args.verb == "run":  # runs the command even when gitmd is unreachable; imports no grpc
        from gitmctl.commands import run

        status = run.run_command(args, socket_path, getattr(args, "timeout", 10.0))
        # the command's status at once: the interpreter's teardown (grpc's and protobuf's modules)
        # took ~20 ms after the exit report, on every job's launch path; nothing of ours is left
        # to run at exit but the streams' buffers
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status & 0xFF)
    from gitmctl.client import Client

    try:
        client = Client(socket_path, timeout_s=getattr(args, "timeout", 10.0))
        try:
            return int(handlers[args.verb].run(args, client))  # type: ignore[attr-defined]
        finally:
            client.close()
    except ClientError as e:
        print(f"gitmctl: {e}", file=sys.stderr)
        if args.json:  # a script reading stdout gets the error as JSON too
            print(json.dumps({"error": str(e), "exit_code": e.exit_code}))
        return 0 if args.verb == "slurm" else e.exit_code  # never fail a scheduler's job
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
