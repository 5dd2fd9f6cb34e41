"""The credential socket: the kernel says who connected, the daemon answers with tokens for them.

Protocol (one exchange per connection, text lines): the client sends ``TOKENS <n>\\n`` (1..64); the
daemon answers ``OK <token> ...\\n`` or ``ERR <reason>\\n`` and closes. The socket is mode 0666: any
local user may ask, and gets tokens for their own uid only — what the client writes cannot change
that. A client that says nothing is dropped after a second.
"""

from __future__ import annotations

import array
import logging
import os
import socket
import socketserver
import struct
import threading
import time
from pathlib import Path
from typing import Any

from gitmd.auth.tokens import Peer, TokenAuthority
from gitmd.errors import StartupError
from gitmd.paths import secure_socket

log = logging.getLogger(__name__)

SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13
MAX_BATCH = 64
MAX_HANDLERS = 64  # credential exchanges at once; a connection beyond them is closed at once
PER_USER = 8  # of those, one uid's at once: one user's idle connections cannot take them all
ROOT_RESERVED = 8  # more for root only: `gitmctl status` gets its token however many users crowd in
DEADLINE_S = 2.0  # one exchange, request to tokens
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_of(sock: socket.socket) -> Peer:
    """The connecting process's pid, uid, gid and supplementary groups, from the kernel."""
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    groups = {gid}
    size = 4 * 64
    while size <= 4 * 65536:
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, size)
        except OSError as e:
            if e.errno == 34:  # ERANGE: more groups than the buffer holds
                size *= 4
                continue
            raise
        ids = array.array("I")
        ids.frombytes(raw[: len(raw) - len(raw) % 4])
        groups.update(ids)
        break
    return Peer(uid=uid, gid=gid, groups=frozenset(groups), pid=pid)


def read_line(sock: socket.socket, limit: int, deadline_s: float = DEADLINE_S) -> bytes:
    """What the peer sent up to and with its first newline, at most ``limit`` bytes (b"" when it
    closed first; the bytes so far, no newline, when it sent ``limit`` without one), within
    ``deadline_s`` for the whole line: a byte a second cannot hold a handler (TimeoutError)."""
    deadline = time.monotonic() + deadline_s
    line = bytearray()
    while not line.endswith(b"\n") and len(line) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long")
        sock.settimeout(left)
        chunk = sock.recv(min(65536, limit - len(line)))
        if not chunk:
            break
        line += chunk
    return bytes(line)


class _Handler(socketserver.BaseRequestHandler):
    server: CredentialServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            peer = peer_of(sock)
            line = read_line(sock, 64)
            parts = line.decode("ascii", "replace").split()
            if len(parts) != 2 or parts[0] != "TOKENS" or not parts[1].isdigit():
                sock.sendall(b"ERR expected 'TOKENS <n>'\n")
                return
            n = int(parts[1])
            if not 1 <= n <= MAX_BATCH:
                sock.sendall(f"ERR n must be 1..{MAX_BATCH}\n".encode())
                return
            tokens = [self.server.authority.issue(peer) for _ in range(n)]
            sock.sendall(("OK " + " ".join(tokens) + "\n").encode("ascii"))
        except OSError as e:  # the client went away or timed out: nothing to do
            log.debug("credential socket: %s", e)


class PeerServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A local socket whose every connection is one short exchange with a kernel-verified peer
    (peer_of), served by ``handler``. Each exchange lasts at most DEADLINE_S of reading and at
    most MAX_HANDLERS run at once (PER_USER of one uid's, ROOT_RESERVED more for root); a
    connection beyond that is closed at once, told so first where the protocol can (``refuse``)
    (hardening issue, item 4: slow clients held a thread each, 2,951 threads, and with
    TasksMax=1024 gitmd could start none). ``mode`` and ``gid`` (-1: the daemon's own) are the
    socket's once bound."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self, path: Path, handler: type[socketserver.BaseRequestHandler], name: str, mode: int, gid: int = -1
    ) -> None:
        self._lock = threading.Lock()
        self._active: dict[int, int] = {}  # uid -> exchanges running
        self._held: dict[int, int] = {}  # id(request) -> its uid, until its exchange ends
        self.refused = 0  # connections closed because every handler was busy
        self.path = path
        self.name = name
        if len(os.fsencode(path)) > 107:
            raise StartupError(f"{name} path {path} is too long for a Unix socket")
        try:
            path.unlink()  # a stale socket of an earlier run; the main socket's lock already holds
        except FileNotFoundError:
            pass
        try:
            super().__init__(str(path), handler)
        except OSError as e:
            raise StartupError(f"cannot listen on {path}: {e.strerror}") from e
        secure_socket(path, mode, gid)
        self._thread: threading.Thread | None = None

    def _take(self, request: Any) -> bool:
        """A handler slot for this connection, by its uid from the kernel: at most PER_USER of one
        uid's at once, MAX_HANDLERS in all, and ROOT_RESERVED more that only root may use (a user
        holding idle connections locked root's `gitmctl status` out: hardening issue, item 4)."""
        try:
            uid = _CRED.unpack(request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[1]
        except OSError:
            return False
        with self._lock:
            total = sum(self._active.values())
            mine = self._active.get(uid, 0)
            if uid == 0:
                ok = mine < PER_USER + ROOT_RESERVED and total < MAX_HANDLERS + ROOT_RESERVED
            else:
                ok = mine < PER_USER and total - min(self._active.get(0, 0), ROOT_RESERVED) < MAX_HANDLERS
            if ok:
                self._active[uid] = mine + 1
                self._held[id(request)] = uid
            return ok

    def _give(self, request: Any) -> None:
        with self._lock:
            uid = self._held.pop(id(request), None)
            if uid is not None:
                self._active[uid] -= 1
                if not self._active[uid]:
                    del self._active[uid]

    def refuse(self, request: socket.socket) -> None:
        """What a connection refused for the limits (``_take``) is told before it is closed: nothing
        here, the close is the refusal (the credential socket's protocol). A subclass whose protocol
        has an error line sends it, so that its client can say gitmd is busy rather than not
        running. It runs on the accepting thread: it must never block (``request`` is non-blocking
        by then) and never raise."""

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._take(request):
            self.refused += 1
            try:
                request.setblocking(False)
                self.refuse(request)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give(request)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class CredentialServer(PeerServer):
    """Tokens for local callers (the module's protocol), on a socket any local user may reach."""

    def __init__(self, path: Path, authority: TokenAuthority) -> None:
        self.authority = authority
        super().__init__(path, _Handler, "credentials", 0o666)

    def start(self) -> None:
        super().start()
        log.info("issuing tokens on unix:%s", self.path)
