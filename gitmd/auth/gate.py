"""The gate every RPC passes: establish the caller, check the access table, audit refusals."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gitmd.auth.access import Access, Caller
from gitmd.auth.tokens import METADATA_KEY, TokenAuthority
from gitmd.errors import PermissionDeniedError, UnauthenticatedError
from gitmd.store import audit
from gitmd.store.audit import Audit

log = logging.getLogger(__name__)


UNAUTHENTICATED_ROWS_PER_S = 20  # a flood of bad tokens cannot grow the audit without bound


class Gate:
    def __init__(self, authority: TokenAuthority, access: Access, audit_log: Audit) -> None:
        self.authority = authority
        self.access = access
        self.audit = audit_log
        self._flood_lock = threading.Lock()
        self._flood_second = 0
        self._flood_rows = 0
        self._flood_dropped = 0

    def _admit_unauthenticated_row(self) -> tuple[bool, int]:
        """Whether to write this unauthenticated row, and how many were left out before it."""
        now = int(time.monotonic())
        with self._flood_lock:
            if now != self._flood_second:
                self._flood_second, self._flood_rows = now, 0
            if self._flood_rows >= UNAUTHENTICATED_ROWS_PER_S:
                self._flood_dropped += 1
                return False, 0
            self._flood_rows += 1
            dropped, self._flood_dropped = self._flood_dropped, 0
            return True, dropped

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
