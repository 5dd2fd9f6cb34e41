"""A real PostgreSQL server for tests and benchmarks (the fleet library): Debian's initdb/pg_ctl,
on loopback, trust auth, in a temporary folder; run as ``nobody`` when the caller is root
(PostgreSQL refuses root). ``available()`` says why it cannot run here, if it cannot."""

from __future__ import annotations

import glob
import grp
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def pg_bin(tool: str) -> str | None:
    """``tool`` on PATH, else Debian's (/usr/lib/postgresql/N/bin), else the server the `pgserver`
    wheel bundles (carried to the GPU host, which has no PostgreSQL: tools/gpu-wheels.sh)."""
    found = shutil.which(tool)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if cands:
        return cands[-1]
    import importlib.util

    spec = importlib.util.find_spec("pgserver")  # located, not imported
    if spec is not None and spec.submodule_search_locations:
        for top in spec.submodule_search_locations:
            p = Path(top) / "pginstall" / "bin" / tool
            if p.is_file():
                return str(p)
    return None


def available() -> str:
    """ "" when a server can be started here, else why not."""
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        return "PostgreSQL's initdb/pg_ctl are not installed (Debian: apt install postgresql)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "running as root needs setpriv to start PostgreSQL as nobody"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group() -> str:
    for name in ("nogroup", "nobody"):
        try:
            grp.getgrnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("no nogroup/nobody group")


class Postgres:
    def __init__(self, max_connections: int = 100) -> None:
        self.top = Path(tempfile.mkdtemp(prefix="gitmd-pg-"))
        self.port = _free_port()
        self.max_connections = max_connections
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.top, "nobody", _group())
            self.run_as = ["setpriv", "--reuid=nobody", f"--regid={_group()}", "--clear-groups"]
        self.url = f"postgresql://gitmd@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.run_as, *argv], check=True, capture_output=True, timeout=120)

    def init(self) -> Postgres:
        initdb = pg_bin("initdb")
        assert initdb is not None
        self._run(initdb, "-D", str(self.top / "data"), "-U", "gitmd", "--auth=trust", "-E", "UTF8")
        return self

    def start(self) -> Postgres:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        opts = f"-k {self.top} -p {self.port} -h 127.0.0.1 -c max_connections={self.max_connections}"
        self._run(
            pg_ctl, "-D", str(self.top / "data"), "-l", str(self.top / "log"), "-o", opts, "-w", "start"
        )
        return self

    def stop(self) -> None:
        pg_ctl = pg_bin("pg_ctl")
        assert pg_ctl is not None
        self._run(pg_ctl, "-D", str(self.top / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.top, ignore_errors=True)

    def sql(self, statement: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            cur = c.execute(statement, params or [])  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []
