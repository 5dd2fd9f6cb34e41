"""The launch socket: the two calls a launcher makes around every job (RegisterJob before the exec,
ReportJobExit after the exit) without gRPC, so that `gitmctl run` need not import grpcio.

Why: the launcher is on every job's path, and grpcio's import (it pulls in asyncio and ssl) with
the generated protobuf code was most of the ~0.29 s it added before the exec on the H100 host
(bench/results/2026-12-07-thirty-ninth-h100.md, run-cost): 7% of a 4-s program's run and the
largest part of what gitmd cost the corpus's short programs. Over this socket the launcher needs
only Python's standard library.

Protocol (one exchange per connection): the client sends one line, a JSON object
``{"rpc": "RegisterJob" | "ReportJobExit", "request": {...}}`` whose request is the RPC's request
message in protobuf's JSON mapping (the API's own messages: no second schema), at most
MAX_REQUEST_BYTES; the daemon answers one line, ``{"response": {...}}`` (the response message,
proto field names, every field written) or ``{"error": {"code": "<gRPC status name>",
"message": "..."}}``, and closes. The caller is who the kernel says connected (SO_PEERCRED, no
token), admitted and audited by the same gate and call slots as a gRPC call, and the method is the
servicer's own. The socket sits beside the API socket (``<stem>-launch.sock``) with its mode and
group: whoever may not reach the API may not reach this. Each exchange's request must arrive within
DEADLINE_S; at most MAX_HANDLERS exchanges run at once, PER_USER of one uid's (PeerServer): a
connection beyond them is answered RESOURCE_EXHAUSTED at once, unread, and closed."""

from __future__ import annotations

import json
import logging
import socket
import socketserver
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from gitmd.api.pb import pb
from gitmd.api.servicer import MAX_DETAILS, GitmdServicer, status_name
from gitmd.api.sockets import MAX_REQUEST_BYTES
from gitmd.auth.gate import Gate
from gitmd.auth.peer import MAX_HANDLERS, PER_USER, PeerServer, peer_of, read_line
from gitmd.errors import GitmdError
from gitmd.phases import SLOW_S, Phases

log = logging.getLogger(__name__)

# the launcher's calls, each with its request message; no other RPC is served here
RPCS = {"RegisterJob": pb.RegisterJobRequest, "ReportJobExit": pb.ReportJobExitRequest}


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message[:MAX_DETAILS]}}


def _rpc_named(line: bytes) -> str:
    """The RPC a request line names, for the log ("a call" where it names none)."""
    try:
        body = json.loads(line)
    except (ValueError, RecursionError):
        return "a call"
    rpc = body.get("rpc") if isinstance(body, dict) else None
    return rpc if isinstance(rpc, str) and rpc in RPCS else "a call"


def _line(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


# the answer to a connection beyond PeerServer's limits: a plain close read as "gitmd is not running"
BUSY = _line(
    _error(
        "RESOURCE_EXHAUSTED",
        f"gitmd is serving as many launchers as it takes at once ({PER_USER} of one user's, "
        f"{MAX_HANDLERS} in all); try again in a moment",
    )
)


class _Handler(socketserver.BaseRequestHandler):
    server: LaunchServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            peer = peer_of(sock)
            line = read_line(sock, MAX_REQUEST_BYTES + 1)
            ph = Phases()
            answer = self.server.answer(peer, line)
            ph.mark("answered")
            sock.settimeout(self.server.reply_timeout_s)
            sock.sendall(_line(answer))
            ph.mark("sent")
            # the launcher waits for this answer (before its exec, or before it can exit); the RPC's
            # name read again only for a slow one's line
            if ph.total_s >= SLOW_S:
                ph.log_if_slow(log, f"launch socket: {_rpc_named(line)} from uid {peer.uid}")
        except OSError as e:  # the client went away or timed out: nothing to do
            log.debug("launch socket: %s", e)


class LaunchServer(PeerServer):
    """The launch socket for ``servicer``'s RegisterJob and ReportJobExit (the module's protocol)."""

    reply_timeout_s = 10.0  # a launcher that stops reading its answer holds a handler no longer

    def __init__(self, path: Path, servicer: GitmdServicer, gate: Gate, mode: int, gid: int = -1) -> None:
        self.servicer = servicer
        self.gate = gate
        super().__init__(path, _Handler, "launch", mode, gid)

    def start(self) -> None:
        super().start()
        log.info("serving launchers on unix:%s", self.path)

    def refuse(self, request: socket.socket) -> None:
        """A connection beyond the limits is told so (BUSY), so that the launcher says gitmd is busy
        rather than not running; one line into an empty buffer, never waited on."""
        request.send(BUSY)

    def answer(self, peer: Any, line: bytes) -> dict[str, Any]:
        """The answer to one request ``line`` from ``peer`` (the module's protocol)."""
        if len(line) > MAX_REQUEST_BYTES:
            return _error("RESOURCE_EXHAUSTED", f"a request is at most {MAX_REQUEST_BYTES} bytes")
        if not line.endswith(b"\n"):
            return _error("INVALID_ARGUMENT", "expected one JSON line ending in a newline")
        try:
            body = json.loads(line)
        except ValueError as e:
            return _error("INVALID_ARGUMENT", f"not JSON: {e}")
        except RecursionError:
            return _error("INVALID_ARGUMENT", "not JSON: nested too deeply")
        if (
            not isinstance(body, dict)
            or set(body) != {"rpc", "request"}
            or not isinstance(body["request"], dict)
        ):
            return _error("INVALID_ARGUMENT", 'expected {"rpc": NAME, "request": {...}}')
        rpc = body["rpc"]
        if rpc not in RPCS:
            return _error("UNIMPLEMENTED", f"the launch socket serves {', '.join(RPCS)} only")
        try:
            # a newer launcher's fields an older daemon does not know are left out, as gRPC does
            request = json_format.ParseDict(body["request"], RPCS[rpc](), ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as e:
            return _error("INVALID_ARGUMENT", f"{rpc}: {e}")
        try:
            caller = self.gate.admit_peer(peer, rpc)
            response = self.servicer.call_as(caller, rpc, request)
        except GitmdError as e:
            code = status_name(e)
            if code == "INTERNAL":
                log.exception("%s failed (launch socket)", rpc)
            return _error(code, str(e))
        except Exception as e:  # one launcher's call never takes the socket down
            log.exception("%s failed (launch socket)", rpc)
            return _error("INTERNAL", f"{type(e).__name__}: {e}")
        return {
            "response": json_format.MessageToDict(
                response, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
            )
        }
