"""Preparing the daemon's directories and exclusive locks before anything is served.

The state and runtime directories are created with safe modes when missing, or refused with a
message that says what is wrong. An flock beside the socket and one in the state directory make a
second instance refuse to start instead of stealing the socket or sharing the store.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import IO

from gitmd.errors import StartupError

STATE_DIR_MODE = 0o750
RUNTIME_DIR_MODE = 0o755  # users must reach the socket inside; the socket itself is 0660


def ensure_dir(path: Path, mode: int, what: str) -> None:
    if path.exists() and not path.is_dir():
        raise StartupError(f"{what} {path} exists and is not a directory")
    if not path.exists():
        try:
            path.mkdir(parents=True, mode=mode)
            os.chmod(path, mode)  # mkdir's mode is masked by the umask
        except OSError as e:
            raise StartupError(f"cannot create {what} {path}: {e.strerror}") from e
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(f"{what} {path} is not writable by uid {os.getuid()}")
    # a fresh random name, created exclusively and never through a link: a predictable name in a
    # directory others can write was a file (or symlink) they could plant for gitmd to write through
    probe = path / f".gitmd-write-test-{secrets.token_hex(8)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        probe.unlink()
    except OSError as e:
        raise StartupError(f"{what} {path} is not writable: {e.strerror}") from e


def secure_socket(path: Path, mode: int, gid: int = -1) -> None:
    """The mode (and group) of a socket gitmd has just bound, set only on that socket: never through
    a symbolic link or onto anything else someone put at its path since (in a directory others can
    write, a chmod that follows links could open any file to everyone)."""
    st = os.lstat(path)
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise StartupError(f"{path} is no longer the socket gitmd bound (replaced since): refusing to serve")
    os.chmod(path, mode)  # lstat said: a socket of ours, not a link
    if gid >= 0:
        os.chown(path, -1, gid, follow_symlinks=False)


class InstanceLock:
    """An flock held for the daemon's life; the file records the holder's pid."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        # never through a link, and only a regular file: with the socket in a directory others can
        # write, a planted symlink made gitmd overwrite a root-owned file with its pid
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            why = "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror
            raise StartupError(f"cannot open lock file {self.path}: {why}") from e
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StartupError(f"cannot open lock file {self.path}: not a regular file")
        fh = open(fd, "r+", encoding="utf-8")  # noqa: SIM115 - held for the daemon's life
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StartupError(
                    f"another gitmd (pid {holder}) already holds the {self.what} ({self.path}); "
                    "stop it first or choose other paths"
                ) from e
            raise StartupError(f"cannot lock {self.path}: {e.strerror}") from e
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def clear_stale_socket(path: Path) -> None:
    """Remove a socket left by a dead instance; refuse when something answers on it."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_socket():
        raise StartupError(f"{path} exists and is not a socket; refusing to replace it")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)
            return
        except OSError as e:
            raise StartupError(f"cannot probe existing socket {path}: {e}") from e
    raise StartupError(f"another process is already serving on {path}; stop it first")
