"""Single-use, uid-bound tokens: minted for a kernel-verified peer, checked once per RPC.

A token is ``v1.<body>.<mac>`` (base64url): the body holds the uid, primary gid, groups and pid the
kernel reported when the client connected to the credential socket, an expiry on the daemon's
monotonic clock and a random nonce; the mac is HMAC-SHA256 of the body under a 32-byte secret drawn
at daemon start and kept only in memory. A token whose mac does not match is forged; one past its
expiry is stale; one whose nonce was already used is replayed — all three are refused. A restart
draws a new secret, so every earlier token dies with the daemon that minted it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gitmd import auth
from gitmd.errors import UnauthenticatedError

VERSION = 1
PREFIX = "v1."
_HEAD = struct.Struct(">BIIIQ16sH")  # version, uid, gid, pid, expires_ns, nonce, n groups
MAX_GROUPS = 256  # keeps a token under 1.6 KB (gRPC refuses metadata beyond 8 KiB at random)
MAX_TOKEN_CHARS = 4096
METADATA_KEY = auth.METADATA_KEY  # re-exported: the server side names it here


@dataclass(frozen=True)
class Peer:
    """What the kernel said about a client of the credential socket."""

    uid: int
    gid: int
    groups: frozenset[int]
    pid: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenAuthority:
    """Mints and checks tokens. Thread-safe; remembers used nonces until their tokens expire."""

    def __init__(
        self,
        ttl_s: float = 60.0,
        secret: bytes | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.ttl_ns = int(ttl_s * 1e9)
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._clock = clock
        self._lock = threading.Lock()
        self._used: dict[bytes, int] = {}
        self._order: deque[tuple[int, bytes]] = deque()

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._secret, body, hashlib.sha256).digest()

    def issue(self, peer: Peer) -> str:
        groups = sorted(peer.groups)[:MAX_GROUPS]
        body = _HEAD.pack(
            VERSION,
            peer.uid,
            peer.gid,
            peer.pid,
            self._clock() + self.ttl_ns,
            secrets.token_bytes(16),
            len(groups),
        ) + struct.pack(f">{len(groups)}I", *groups)
        return f"{PREFIX}{_b64(body)}.{_b64(self._mac(body))}"

    def redeem(self, token: str) -> Peer:
        """The peer the token was minted for; UnauthenticatedError if forged, stale or replayed."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.startswith(PREFIX):
            raise UnauthenticatedError("malformed token")
        parts = token[len(PREFIX) :].split(".")
        if len(parts) != 2:
            raise UnauthenticatedError("malformed token")
        try:
            body, mac = _unb64(parts[0]), _unb64(parts[1])
        except (binascii.Error, ValueError):
            raise UnauthenticatedError("malformed token") from None
        if not hmac.compare_digest(mac, self._mac(body)):
            raise UnauthenticatedError("token not issued by this gitmd (forged, or from before a restart)")
        # The mac held, so the body is ours and well formed.
        version, uid, gid, pid, expires, nonce, n = _HEAD.unpack_from(body)
        groups = struct.unpack_from(f">{n}I", body, _HEAD.size)
        now = self._clock()
        if version != VERSION or now > expires:
            raise UnauthenticatedError("token expired; a new one is fetched per call")
        with self._lock:
            while self._order and self._order[0][0] < now:
                self._used.pop(self._order.popleft()[1], None)
            if nonce in self._used:
                raise UnauthenticatedError("token already used (replayed)")
            self._used[nonce] = expires
            self._order.append((expires, nonce))
        return Peer(uid=uid, gid=gid, groups=frozenset(groups), pid=pid)

    def outstanding(self) -> int:
        """Used nonces still remembered (for tests and metrics)."""
        with self._lock:
            return len(self._used)
