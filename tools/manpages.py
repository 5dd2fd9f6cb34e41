#!/usr/bin/env python3
"""Man pages gitmd(8) and gitmctl(1), generated from the real argparse parsers so they never drift.

    python tools/manpages.py --out DIR     # writes DIR/gitmd.8 and DIR/gitmctl.1
    python tools/manpages.py gitmctl       # one page on standard output

Every option, verb and help text comes from gitmd.__main__.build_parser() and
gitmctl.__main__.build_parser(); the FILES section from gitmd's configuration defaults. Standard
library only. tools/completion.py walks the same parsers through ``command_tree`` below.
Run it with the packaged (or the repository's) virtual environment: it imports gitmd and gitmctl.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # document this tree's code, whichever environment runs the tool
    sys.path.insert(0, str(ROOT))


# --- the parsers, as a tree of commands ----------------------------------------------------------


@dataclass
class Command:
    """One parser: the program itself, a verb (``run``) or a verb's action (``library show``)."""

    path: tuple[str, ...]  # () for the program, ("library", "show") for an action
    parser: argparse.ArgumentParser
    help: str
    optionals: list[argparse.Action]  # its own options (a verb's: no -h, none of the program's)
    inherited: list[argparse.Action]  # the program's options it accepts too (gitmctl's --json...)
    positionals: list[argparse.Action]
    subcommands: list[Command] = field(default_factory=list)

    def walk(self) -> Iterator[Command]:
        yield self
        for c in self.subcommands:
            yield from c.walk()


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a
    return None


def command_tree(
    parser: argparse.ArgumentParser,
    path: tuple[str, ...] = (),
    help: str = "",
    program: frozenset[int] = frozenset(),
) -> Command:
    """The command ``parser`` is, with its verbs (and their actions) below it.

    Options a verb shares with the program (argparse parents copy the same Action objects) are
    ``inherited``: documented once, with the program's options.
    """
    if not path:
        program = frozenset(id(a) for a in parser._actions)
    cmd = Command(path, parser, help, [], [], [])
    for a in parser._actions:
        if a.help == argparse.SUPPRESS or isinstance(a, argparse._SubParsersAction):
            continue
        if isinstance(a, argparse._HelpAction) and path:
            continue  # every verb takes -h; said once
        if not a.option_strings:
            cmd.positionals.append(a)
        elif path and id(a) in program:
            cmd.inherited.append(a)
        else:
            cmd.optionals.append(a)
    sub = _subparsers(parser)
    if sub is not None:
        helps = {c.dest: c.help or "" for c in sub._choices_actions}
        seen: set[int] = set()
        for name, p in sub.choices.items():
            if id(p) in seen:  # an alias: the same parser under a second name
                continue
            seen.add(id(p))
            cmd.subcommands.append(command_tree(p, (*path, name), helps.get(name, ""), program))
    return cmd


def gitmd_parser() -> argparse.ArgumentParser:
    from gitmd.__main__ import build_parser

    return build_parser()


def gitmctl_parser() -> argparse.ArgumentParser:
    from gitmctl.__main__ import build_parser

    return build_parser()[0]


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    try:  # one line (roff fills it), never coloured (Python 3.14 colours help on a terminal)
        return argparse.HelpFormatter(parser.prog, width=100_000, color=False)  # type: ignore[call-arg]
    except TypeError:  # Python before 3.14
        return argparse.HelpFormatter(parser.prog, width=100_000)


def expand_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help with argparse's %(default)s and the like filled in."""
    return _formatter(parser)._expand_help(action) if action.help else ""


def metavar(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """What follows the option (``N``, ``{auto,nvml}``, ``[FILE ...]``), "" for a flag."""
    if action.nargs == 0:
        return ""
    f = _formatter(parser)
    if action.option_strings:
        return f._format_args(action, f._get_default_metavar_for_optional(action))
    return f._format_args(action, f._get_default_metavar_for_positional(action))


def usage(cmd: Command) -> str:
    """argparse's own usage line for the command, without the options documented elsewhere."""
    f = _formatter(cmd.parser)
    actions = [a for a in cmd.parser._actions if a not in cmd.inherited and a.help != argparse.SUPPRESS]
    if cmd.path:
        actions = [a for a in actions if not isinstance(a, argparse._HelpAction)]
    f.add_usage(None, actions, cmd.parser._mutually_exclusive_groups, prefix="")
    return " ".join(f.format_help().split())


# --- roff ----------------------------------------------------------------------------------------


def esc(text: str) -> str:
    """Text made safe for roff: backslashes, hyphens as \\-, non-ASCII as \\[uXXXX].

    `code` spans become bold. A line-leading dot or quote is handled by ``text_line``.
    """
    out = text.replace("\\", "\\e").replace("-", "\\-")
    out = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in out)
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fR", out)


def text_line(roff: str) -> str:
    """A text line (already escaped) that roff cannot take for a request: \\& before . or '."""
    return "\\&" + roff if roff.startswith((".", "'")) else roff


def arg(text: str) -> str:
    """A macro argument: escaped and quoted."""
    return '"' + esc(text).replace('"', "\\(dq") + '"'


def bold(text: str) -> str:
    return f"\\fB{esc(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{esc(text)}\\fR"


def _default_note(action: argparse.Action, help_text: str) -> str:
    d = action.default
    if action.nargs == 0 or d in (None, argparse.SUPPRESS, "", (), []) or "default" in help_text.lower():
        return ""
    return f" (default: {d})"


def option_item(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    """``.TP`` + the option's strings and metavar + its help."""
    head = ", ".join(bold(s) for s in action.option_strings) if action.option_strings else ""
    mv = metavar(parser, action)
    if not action.option_strings:
        head = italic(str(action.metavar or action.dest))
    elif mv:
        head += " " + italic(mv)
    h = expand_help(parser, action)
    body = h + _default_note(action, h)
    lines = [".TP", text_line(head)]
    if body:
        lines.append(text_line(esc(body)))
    return lines


def paragraph(text: str) -> list[str]:
    """Text as roff lines: one line per source paragraph, .PP between them."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        if out:
            out.append(".PP")
        out.append(text_line(esc(" ".join(para.split()))))
    return out


def _date() -> str:
    """The page's date: $SOURCE_DATE_EPOCH, else the last commit's, else today (reproducible builds)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        return datetime.datetime.fromtimestamp(int(epoch), datetime.UTC).strftime("%Y-%m-%d")
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%cs"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        if r.returncode == 0 and re.fullmatch(r"\d{4}-\d\d-\d\d", r.stdout.strip()):
            return r.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return datetime.date.today().isoformat()


def _header(name: str, section: int, title: str, what: str, summary: str) -> list[str]:
    from gitmd import __version__

    return [
        f'.\\" {name}.{section}: generated by tools/manpages.py from the argparse parser; do not edit.',
        f'.TH {name.upper()} {section} "{_date()}" {arg("gitmd " + __version__)} {arg(title)}',
        ".nh",  # no hyphenation: option names and paths stay whole
        ".SH NAME",
        text_line(f"{esc(name)} \\- {esc(summary)}"),
        ".SH SYNOPSIS",
        text_line(f"{bold(name)} {esc(what)}"),
    ]


def _summary(parser: argparse.ArgumentParser) -> str:
    """NAME's one line from the parser's description: "gitmd: the daemon..." -> "the daemon"."""
    text = (parser.description or "").strip()
    text = re.sub(rf"^{re.escape(parser.prog)}:\s*", "", text).rstrip(".")
    return text if text[1:2].isupper() else text[:1].lower() + text[1:]  # "GPU...": kept as is


def _docstring(module: str) -> str:
    """A package's docstring, its leading "name: " made "name is "."""
    import importlib

    doc = importlib.import_module(module).__doc__ or ""
    return re.sub(rf"^{re.escape(module)}:\s*", f"{module} is ", doc.strip())


def _files(items: list[tuple[str, str]]) -> list[str]:
    out = [".SH FILES"]
    for path, what in items:
        out += [".TP", text_line(italic(path)), text_line(esc(what))]
    return out


def _daemon_paths() -> dict[str, Path]:
    from gitmd.api.client_auth import credential_socket_for
    from gitmd.config import DEFAULT_CONFIG_PATH, DaemonConfig

    d = DaemonConfig()
    saved = os.environ.pop("GITMD_AUTH_SOCKET", None)  # the default, not this builder's setting
    try:
        auth = credential_socket_for(d.socket_path)
    finally:
        if saved is not None:
            os.environ["GITMD_AUTH_SOCKET"] = saved
    return {
        "config": DEFAULT_CONFIG_PATH,
        "state": d.state_dir,
        "db": d.db_path,
        "runtime": d.runtime_dir,
        "socket": d.socket_path,
        "auth": auth,
    }


def gitmd_page(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or gitmd_parser()
    cmd = command_tree(parser)
    paths = _daemon_paths()
    lines = _header(
        "gitmd", 8, "System Administration", usage(cmd).removeprefix("gitmd").strip(), _summary(parser)
    )
    lines += [".SH DESCRIPTION", *paragraph(_docstring("gitmd"))]
    lines += [
        ".PP",
        text_line(
            esc(
                "It runs in the foreground; the package runs it as the systemd service gitmd.service "
                f"(`systemctl reload gitmd` reads {paths['config']} again). gitmctl(1) is its command line."
            )
        ),
        ".SH OPTIONS",
    ]
    for a in cmd.optionals:
        lines += option_item(parser, a)
    lines += _files(
        [
            (str(paths["config"]), "the configuration (TOML), read when --config is not given"),
            (str(paths["state"]), "the state directory (daemon.state_dir)"),
            (str(paths["db"]), "the store: telemetry, jobs, the library of validated policies, the audit"),
            (str(paths["runtime"]), "the runtime directory (daemon.runtime_dir): sockets, per-job rings"),
            (str(paths["socket"]), "the gRPC API's Unix socket (daemon.socket) that gitmctl(1) talks to"),
            (str(paths["auth"]), "the socket where clients fetch their tokens ($GITMD_AUTH_SOCKET)"),
        ]
    )
    lines += [
        ".SH SIGNALS",
        ".TP",
        bold("SIGHUP"),
        text_line(
            esc("read the configuration again (the log level applies at once; other changes at restart)")
        ),
        ".TP",
        bold("SIGTERM, SIGINT"),
        text_line(esc("stop cleanly: unvalidated interventions are reverted")),
        ".SH SEE ALSO",
        text_line(
            r"\fBgitmctl\fR(1), \fBsystemctl\fR(1), \fBjournalctl\fR(1), \fBsystemd.service\fR(5), "
            + italic("/usr/share/doc/gitmd/")
        ),
    ]
    return "\n".join(lines) + "\n"


def _command_section(cmd: Command, top: bool) -> list[str]:
    """A verb's subsection (top) or an action's entry inside its verb's subsection."""
    name = " ".join(cmd.path)
    rest = usage(cmd).removeprefix(cmd.parser.prog).strip()
    synopsis = text_line(f"{bold('gitmctl ' + name)} {esc(rest)}".rstrip())
    if top:
        lines = [f".SS {arg('gitmctl ' + name)}"]
        if cmd.help:
            lines.append(text_line(esc(cmd.help)))
        lines += [".PP", synopsis]
    else:
        lines = [".TP", synopsis]
        if cmd.help:
            lines.append(text_line(esc(cmd.help)))
    body: list[str] = []
    if cmd.parser.description:
        body += [".PP", *paragraph(cmd.parser.description)]
    for a in cmd.positionals:
        if a.help:  # a bare positional is in the synopsis already
            body += option_item(cmd.parser, a)
    for a in cmd.optionals:
        body += option_item(cmd.parser, a)
    for sub in cmd.subcommands:
        body += _command_section(sub, top=False)
    if body and not top:  # an action's options, indented under it
        body = [".RS", *body, ".RE"]
    return lines + body


def gitmctl_page(parser: argparse.ArgumentParser | None = None) -> str:
    from gitmctl.client import DEFAULT_SOCKET

    parser = parser or gitmctl_parser()
    cmd = command_tree(parser)
    paths = _daemon_paths()
    lines = _header(
        "gitmctl", 1, "User Commands", usage(cmd).removeprefix("gitmctl").strip(), _summary(parser)
    )
    lines += [".SH DESCRIPTION", *paragraph(_docstring("gitmctl"))]
    lines += [
        ".PP",
        text_line(
            esc(
                "The options below may be given before the verb or after it. Every verb takes -h, "
                "--help: its own usage. Who may do what is decided by gitmd for each call (the groups "
                "gitm and gitm-admin)."
            )
        ),
        ".SH OPTIONS",
    ]
    for a in cmd.optionals:
        lines += option_item(parser, a)
    lines.append(".SH COMMANDS")
    for verb in cmd.subcommands:
        lines += _command_section(verb, top=True)
    lines += [
        ".SH ENVIRONMENT",
        ".TP",
        bold("GITMD_SOCKET"),
        text_line(esc(f"gitmd's socket when --socket is not given (default {DEFAULT_SOCKET})")),
        ".TP",
        bold("GITMD_AUTH_SOCKET"),
        text_line(esc("where tokens are fetched (default: beside gitmd's socket)")),
    ]
    if parser.epilog:
        lines += [".SH EXIT STATUS", *paragraph(parser.epilog)]
    lines += _files(
        [
            (str(DEFAULT_SOCKET), "gitmd's socket, the default of --socket"),
            (str(paths["auth"]), "the socket where gitmctl fetches its token"),
            (str(paths["config"]), "gitmd's configuration (gitmctl status --config shows the one in effect)"),
        ]
    )
    lines += [
        ".SH SEE ALSO",
        text_line(r"\fBgitmd\fR(8), " + italic("/usr/share/doc/gitmd/")),
    ]
    return "\n".join(lines) + "\n"


PAGES = {"gitmd": ("gitmd.8", gitmd_page), "gitmctl": ("gitmctl.1", gitmctl_page)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="gitmd(8) and gitmctl(1) from the argparse parsers")
    ap.add_argument("page", nargs="?", choices=sorted(PAGES), help="write this page to standard output")
    ap.add_argument("--out", type=Path, help="write gitmd.8 and gitmctl.1 into this directory")
    args = ap.parse_args(argv)
    if (args.page is None) == (args.out is None):
        ap.error("give a page or --out DIR")
    if args.page:
        sys.stdout.write(PAGES[args.page][1]())
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for filename, build in PAGES.values():
        (args.out / filename).write_text(build(), encoding="ascii")
    return 0


if __name__ == "__main__":
    sys.exit(main())
