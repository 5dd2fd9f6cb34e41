"""Who may do what: callers, roles, and the one table of what each RPC needs.

Roles:
  reader     read-only calls (status, GPUs, telemetry, every job's summary, the library):
             members of ``access.read_group`` (default ``gitm``)
  admin      library-wide actions (pin, unpin, revert a policy, import) and every job:
             members of ``access.admin_group`` (default ``gitm-admin``)
  scheduler  registers and closes jobs on behalf of users (remote schedulers by certificate; root)
Root (uid 0) holds all three. Everyone else may register jobs as themselves and inspect, trace,
tune and revert their own jobs. Device levers need root *and* ``access.allow_device_levers``.
"""

from __future__ import annotations

import enum
import grp
import pwd
import time
from dataclasses import dataclass

from gitmd.auth.tokens import Peer
from gitmd.errors import PermissionDeniedError

READER = "reader"
ADMIN = "admin"
SCHEDULER = "scheduler"
ROLES = (READER, ADMIN, SCHEDULER)


class Need(enum.Enum):
    """What an RPC requires of its caller before it looks at any object."""

    ANY = "any authenticated caller"  # own objects only; checked again per job
    READ = "the reader role"
    ADMIN = "the admin role"
    SCHEDULER = "the scheduler role (root, a scheduler certificate, or admin)"


# The one table: every RPC of the Gitmd service and what it needs. Per-job calls are ANY here and
# check ownership against the job (``may_touch_job``); a test asserts every RPC is listed.
RPC_NEEDS: dict[str, Need] = {
    "GetStatus": Need.READ,
    "ListGpus": Need.READ,
    "GetTelemetry": Need.READ,
    "WatchTelemetry": Need.READ,
    "RegisterJob": Need.ANY,
    "ReportJobExit": Need.ANY,
    "ListJobs": Need.ANY,  # filtered to the caller's jobs unless a reader
    "GetJob": Need.ANY,
    "WatchJobs": Need.ANY,  # one's own job; every job needs READ
    "ReportSchedulerJob": Need.SCHEDULER,
    "GetAttribution": Need.ANY,
    "TraceJob": Need.ANY,
    "ListWorkloads": Need.READ,
    "GetWorkload": Need.READ,
    "ExportLibrary": Need.READ,
    "PinPolicy": Need.ADMIN,
    "SetPause": Need.ADMIN,
    "UnpinPolicy": Need.ADMIN,
    "RevertPolicy": Need.ADMIN,
    "SetWorkloadContract": Need.ANY,  # the caller's consent, for their own runs
    "GetWorkloadContract": Need.ANY,
    "ImportLibrary": Need.ADMIN,
    "ListInterventions": Need.ANY,  # the caller's jobs; every job needs READ
    "RevertIntervention": Need.ANY,  # its job's owner, or admin
    "GetExperiment": Need.ANY,  # its job's owner or a reader
    "RecordTune": Need.ANY,  # its job's owner; the policy is scoped to them unless admin
    "CompareOutputs": Need.ANY,  # the caller's own data; nothing stored
    "ExplainCapture": Need.ANY,  # the caller's own capture files; nothing stored
    "ListLevers": Need.ANY,  # the catalog is no secret: `gitmctl tune` needs it
    "WhoAmI": Need.ANY,
    "ListAudit": Need.READ,
}


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: a local uid (from the kernel) or a remote certificate subject."""

    name: str  # for messages and the audit: "uid 1001 (alice)" or "tls:CN=slurm-ctl"
    roles: frozenset[str]
    uid: int | None = None  # None: remote
    gid: int | None = None
    pid: int = 0

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    @property
    def is_reader(self) -> bool:
        return READER in self.roles or ADMIN in self.roles

    @property
    def acts_for_others(self) -> bool:
        """May register and close jobs for any user (root, admins, schedulers)."""
        return bool(self.roles & {ADMIN, SCHEDULER})


NAME_CACHE_S = 10.0  # group and user names are looked up again after this long


class _Names:
    """getgrnam/getpwuid read /etc/group and /etc/passwd (or NSS) each time: cached for a few
    seconds, so a group created or a user renamed counts within NAME_CACHE_S."""

    def __init__(self) -> None:
        self._gids: dict[str, tuple[float, int | None]] = {}
        self._users: dict[int, tuple[float, str]] = {}

    def gid(self, name: str) -> int | None:
        if not name:
            return None
        now = time.monotonic()
        hit = self._gids.get(name)
        if hit is not None and now - hit[0] < NAME_CACHE_S:
            return hit[1]
        try:
            gid: int | None = grp.getgrnam(name).gr_gid
        except KeyError:
            gid = None
        self._gids[name] = (now, gid)
        return gid

    def user(self, uid: int) -> str:
        now = time.monotonic()
        hit = self._users.get(uid)
        if hit is not None and now - hit[0] < NAME_CACHE_S:
            return hit[1]
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = "?"
        if len(self._users) > 65536:
            self._users.clear()
        self._users[uid] = (now, name)
        return name


class Access:
    """Turns kernel-verified peers and certificate subjects into callers, and checks needs."""

    def __init__(
        self,
        read_group: str = "gitm",
        admin_group: str = "gitm-admin",
        allow_device_levers: bool = False,
        remote_subjects: dict[str, str] | None = None,
    ) -> None:
        self.read_group = read_group
        self.admin_group = admin_group
        self.allow_device_levers = allow_device_levers
        self.remote_subjects = dict(remote_subjects or {})
        self._names = _Names()

    def local(self, peer: Peer) -> Caller:
        roles: set[str] = set()
        if peer.uid == 0:
            roles = {READER, ADMIN, SCHEDULER}
        else:
            # Group ids are looked up again every few seconds, so a group created after start counts.
            read_gid, admin_gid = self._names.gid(self.read_group), self._names.gid(self.admin_group)
            if read_gid is not None and read_gid in peer.groups:
                roles.add(READER)
            if admin_gid is not None and admin_gid in peer.groups:
                roles |= {READER, ADMIN}
        return Caller(
            name=f"uid {peer.uid} ({self._names.user(peer.uid)})",
            roles=frozenset(roles),
            uid=peer.uid,
            gid=peer.gid,
            pid=peer.pid,
        )

    def remote(self, subject: str) -> Caller:
        role = self.remote_subjects.get(subject)
        if role is None:
            raise PermissionDeniedError(f"certificate subject {subject!r} has no role in remote.subjects")
        roles = {role} | ({READER} if role in (ADMIN, SCHEDULER) else set())
        return Caller(name=f"tls:{subject}", roles=frozenset(roles))

    def check(self, caller: Caller, rpc: str) -> None:
        need = RPC_NEEDS.get(rpc)
        if need is None:
            raise PermissionDeniedError(f"{rpc} is not in the access table")
        if need is Need.READ and not caller.is_reader:
            raise PermissionDeniedError(
                f"{rpc} needs {need.value} (root, or group {self.read_group!r}); {caller.name} has it not"
            )
        if need is Need.SCHEDULER and not caller.acts_for_others:
            raise PermissionDeniedError(f"{rpc} needs {need.value}; {caller.name} has it not")
        if need is Need.ADMIN and ADMIN not in caller.roles:
            raise PermissionDeniedError(
                f"{rpc} needs {need.value} (root, or group {self.admin_group!r}); {caller.name} has it not"
            )

    @staticmethod
    def may_read_job(caller: Caller, job_uid: int) -> bool:
        """Summary of a job: its owner, readers, schedulers."""
        return caller.uid == job_uid or caller.is_reader or caller.acts_for_others

    @staticmethod
    def may_touch_job(caller: Caller, job_uid: int) -> bool:
        """Detail and changes (attribution, trace, tune, revert): its owner and admins (and root)."""
        return caller.uid == job_uid or ADMIN in caller.roles

    @staticmethod
    def may_close_job(caller: Caller, job_uid: int) -> bool:
        """Report a job's exit: its owner, its scheduler, admins."""
        return caller.uid == job_uid or caller.acts_for_others

    def check_device_levers(self, caller: Caller) -> None:
        if not self.allow_device_levers:
            raise PermissionDeniedError("device levers are off (access.allow_device_levers = false)")
        if not caller.is_root:
            raise PermissionDeniedError(f"device levers need root; {caller.name} is not")

    def registration_owner(self, caller: Caller, uid: int, gid: int) -> tuple[int, int]:
        """The uid and gid a registration's job belongs to.

        A local user registers as themselves: the uid from the kernel, whatever the request says (a
        request naming another uid is refused). Root and schedulers register on behalf of the uid and
        gid they name."""
        if caller.acts_for_others:
            return uid, gid
        assert caller.uid is not None and caller.gid is not None
        if uid not in (0, caller.uid):
            raise PermissionDeniedError(f"{caller.name} cannot register a job for uid {uid}")
        return caller.uid, caller.gid
