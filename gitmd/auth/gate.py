"""The gate every RPC passes: establish the caller, check the access table, audit refusals."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gitmd.auth.access import Access, Caller
from gitmd.auth.tokens import METADATA_KEY, Peer, TokenAuthority
from gitmd.errors import PermissionDeniedError, UnauthenticatedError
from gitmd.store import audit
from gitmd.store.audit import Audit

log = logging.getLogger(__name__)


# Refusals are audited at most this many rows a second per caller (and for unauthenticated calls
# together): a user's flood of refused calls wrote 1,412 rows/s (hardening issue, item 5). The
# rows left out are counted in the next row written for that caller.
REFUSED_ROWS_PER_S = 20
UNAUTHENTICATED_ROWS_PER_S = REFUSED_ROWS_PER_S


class Gate:
    def __init__(self, authority: TokenAuthority, access: Access, audit_log: Audit) -> None:
        self.authority = authority
        self.access = access
        self.audit = audit_log
        self._flood_lock = threading.Lock()
        # caller key -> [second, rows written in it, rows left out since the last one written]
        self._flood: dict[str, list[int]] = {}

    def _admit_row(self, key: str) -> tuple[bool, int]:
        """Whether to write this refusal's row for ``key``, and how many were left out before it."""
        now = int(time.monotonic())
        with self._flood_lock:
            if len(self._flood) > 4096:  # bounded: callers quiet this second are forgotten
                self._flood = {k: v for k, v in self._flood.items() if v[0] == now}
            st = self._flood.setdefault(key, [now, 0, 0])
            if st[0] != now:
                st[0], st[1] = now, 0
            if st[1] >= REFUSED_ROWS_PER_S:
                st[2] += 1
                return False, 0
            st[1] += 1
            dropped, st[2] = st[2], 0
            return True, dropped

    def _admit_unauthenticated_row(self) -> tuple[bool, int]:
        return self._admit_row("")

    def caller(self, context: Any) -> Caller:
        """Who is calling: a token's uid on the Unix socket, a certificate's subject over TCP."""
        peer = context.peer() or ""
        if peer.startswith("unix:"):
            tokens = [v for k, v in (context.invocation_metadata() or ()) if k == METADATA_KEY]
            if len(tokens) != 1 or not isinstance(tokens[0], str):
                raise UnauthenticatedError(
                    "no token: fetch one from gitmd's credential socket (gitmctl and "
                    "gitmd.api.client_auth do this for every call)"
                )
            return self.access.local(self.authority.redeem(tokens[0]))
        auth = context.auth_context() or {}
        if auth.get("transport_security_type") != [b"ssl"]:
            raise UnauthenticatedError("TCP callers must use mutual TLS")
        names = auth.get("x509_common_name") or []
        if not names:
            raise UnauthenticatedError("a client certificate with a common name is required")
        return self.access.remote(names[0].decode("utf-8", "replace"))

    def admit(self, context: Any, rpc: str) -> Caller:
        try:
            caller = self.caller(context)
        except UnauthenticatedError as e:
            write, dropped = self._admit_unauthenticated_row()
            if write:
                more = (
                    f" ({dropped} more unauthenticated calls before this one were not recorded)"
                    if dropped
                    else ""
                )
                self.record(None, rpc, "unauthenticated", detail=f"{e}{more}")
            raise
        except PermissionDeniedError as e:
            self.record(None, rpc, "denied", detail=str(e))
            raise
        return self._checked(caller, rpc)

    def admit_peer(self, peer: Peer, rpc: str) -> Caller:
        """``admit`` for a caller the kernel named on a socket of gitmd's own (the launch socket:
        SO_PEERCRED, no token needed)."""
        return self._checked(self.access.local(peer), rpc)

    def _checked(self, caller: Caller, rpc: str) -> Caller:
        try:
            self.access.check(caller, rpc)
        except PermissionDeniedError as e:
            self.record(caller, rpc, "denied", detail=str(e))
            raise
        return caller

    def record(
        self,
        caller: Caller | None,
        action: str,
        outcome: str,
        target: str = "",
        detail: str = "",
        scheduler_job_id: str = "",
    ) -> None:
        if caller is not None and outcome != "ok":
            write, dropped = self._admit_row(caller.name)
            if not write:
                return
            if dropped:
                detail += f" ({dropped} more refusals of {caller.name} before this one were not recorded)"
        try:
            self.audit.append(
                audit.row(
                    caller.name if caller else "unknown",
                    caller.uid if caller else None,
                    action,
                    outcome,
                    target,
                    detail,
                    scheduler_job_id,
                )
            )
        except Exception:  # the audit must never turn a refusal into a crash
            log.exception("cannot write the audit row for %s (%s)", action, outcome)
