import os
import socket
from pathlib import Path

import pytest

from gitmd.errors import StartupError
from gitmd.paths import InstanceLock, clear_stale_socket, ensure_dir


def test_ensure_dir_creates_with_mode(tmp_path: Path) -> None:
    d = tmp_path / "a" / "b"
    ensure_dir(d, 0o750, "state directory")
    assert d.is_dir() and (d.stat().st_mode & 0o777) == 0o750


def test_ensure_dir_refuses_a_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(StartupError, match="not a directory"):
        ensure_dir(f, 0o750, "state directory")
    with pytest.raises(StartupError, match="cannot create"):
        ensure_dir(f / "sub", 0o750, "state directory")


def test_lock_is_exclusive(tmp_path: Path) -> None:
    a = InstanceLock(tmp_path / "l", "state directory")
    a.acquire()
    b = InstanceLock(tmp_path / "l", "state directory")
    with pytest.raises(StartupError, match=f"another gitmd \\(pid {os.getpid()}\\)"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()


def test_stale_socket_removed_live_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    with pytest.raises(StartupError, match="already serving"):
        clear_stale_socket(path)
    srv.close()  # now nobody listens: the socket file is stale
    clear_stale_socket(path)
    assert not path.exists()


def test_non_socket_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    path.write_text("precious")
    with pytest.raises(StartupError, match="not a socket"):
        clear_stale_socket(path)
    assert path.read_text() == "precious"


def test_the_lock_file_is_never_opened_through_a_link(tmp_path: Path) -> None:
    """With the socket in a directory others can write, a planted symlink made gitmd overwrite a
    root-owned file with its pid (hardening issue): the lock is refused and the target untouched."""
    import pytest

    from gitmd.errors import StartupError

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "l").symlink_to(victim)
    with pytest.raises(StartupError, match="symbolic link"):
        InstanceLock(tmp_path / "l", "socket").acquire()
    assert victim.read_text() == "precious\n"
    (tmp_path / "d").mkdir()
    with pytest.raises(StartupError, match="cannot open lock file"):
        InstanceLock(tmp_path / "d", "socket").acquire()


def test_a_socket_is_secured_only_if_it_is_still_the_one_gitmd_bound(tmp_path: Path) -> None:
    """Hardening issue, item 7: every path gitmd creates is set without following links. A socket
    replaced by a symlink (to a root-owned file) between bind and chmod would have opened that
    file to everyone: it is refused, the file untouched; a real socket of ours gets its mode."""
    import socket
    import stat

    from gitmd.paths import secure_socket

    sock_path = tmp_path / "g.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    try:
        secure_socket(sock_path, 0o660)
        assert stat.S_IMODE(os.lstat(sock_path).st_mode) == 0o660
        victim = tmp_path / "shadow"
        victim.write_text("secret")
        os.chmod(victim, 0o600)
        planted = tmp_path / "planted.sock"
        planted.symlink_to(victim)
        with pytest.raises(StartupError, match="no longer the socket gitmd bound"):
            secure_socket(planted, 0o666)
        assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600
    finally:
        s.close()


def test_the_write_probe_is_a_fresh_name_never_written_through_a_link(tmp_path: Path) -> None:
    from gitmd.paths import ensure_dir

    d = tmp_path / "state"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (d / f".gitmd-write-test-{os.getpid()}").symlink_to(victim)  # the old, predictable name
    ensure_dir(d, 0o750, "state directory")
    assert victim.read_text() == "keep"
    assert [p.name for p in d.iterdir()] == [f".gitmd-write-test-{os.getpid()}"]  # nothing left behind
