"""The .deb: it builds, holds what it must, and what it installs runs (in a throwaway root)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT

pytestmark = [
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed"),
    # building the package installs gitmd's venv (numpy, scipy, statsmodels...): minutes, not seconds
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deb")
    r = subprocess.run(
        ["bash", "packaging/deb/build.sh"],
        cwd=ROOT,
        env={**os.environ, "DEB_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    debs = list(out.glob("gitmd_*.deb"))
    assert len(debs) == 1
    return debs[0]


def test_contents(deb: Path) -> None:
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    paths = {line.split()[-1].lstrip(".") for line in listing.splitlines()}
    for required in (
        "/usr/bin/gitmd",
        "/usr/bin/gitmctl",
        "/lib/systemd/system/gitmd.service",
        "/etc/gitmd/gitmd.toml",
        "/usr/lib/sysusers.d/gitmd.conf",
        "/usr/lib/tmpfiles.d/gitmd.conf",
        "/opt/gitmd/venv/pyvenv.cfg",
        "/usr/lib/gitmd/slurm/gitmd-prolog",
        "/usr/lib/gitmd/slurm/gitmd-epilog",
        "/usr/lib/gitmd/slurm/gitmd-taskprolog",
        "/usr/bin/gitm-launch",
    ):
        assert required in paths, required
    assert any(p.endswith("/gitmd/api/_generated/gitm/v1/gitmd_pb2.py") for p in paths), (
        "generated code missing"
    )
    if (ROOT / "shim" / "build" / "libgitm_shim.so").exists():
        assert "/usr/lib/gitmd/libgitm_shim.so" in paths, "the built shim must be packaged"
    if (ROOT / "shim" / "build" / "libgitm_guard.so").exists():
        assert "/usr/lib/gitmd/libgitm_guard.so" in paths, "the free guard must be packaged"
    if (ROOT / "shim" / "build" / "libgitm_clock.so").exists():
        assert "/usr/lib/gitmd/libgitm_clock.so" in paths, "the clock library goes beside the shim"
    assert any(p.endswith("/gitmd/store/migrations/0002_jobs.sql") for p in paths)
    info = subprocess.run(["dpkg-deb", "--info", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Package: gitmd" in info and "Depends: python3." in info
    ctrl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True).stdout
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(ctrl)) as tar:
        names = {m.name.lstrip("./") for m in tar.getmembers()}
        assert {"postinst", "prerm", "postrm", "conffiles"} <= names
        conf = tar.extractfile("./conffiles")
        assert conf is not None and conf.read().decode().split() == ["/etc/gitmd/gitmd.toml"]


def test_installed_tools_run_from_a_throwaway_root(deb: Path, short_tmp: Path) -> None:
    root = short_tmp / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    gitmd, gitmctl = root / "usr/bin/gitmd", root / "usr/bin/gitmctl"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    r = subprocess.run([str(gitmctl), "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "telemetry" in r.stdout, r.stderr
    r = subprocess.run(
        [str(gitmd), "--check-config", "--config", str(root / "etc/gitmd/gitmd.toml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0 and tomllib.loads(r.stdout)["telemetry"]["backend"] == "auto", r.stderr
    # The installed daemon serves, and the installed CLI talks to it.
    prefix = short_tmp / "v"
    proc = subprocess.Popen(
        [
            str(gitmd),
            "--prefix",
            str(prefix),
            "--backend",
            "sim",
            "--metrics-port",
            "0",
            "--config",
            str(root / "etc/gitmd/gitmd.toml"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for _ in range(100):
            r = subprocess.run(
                [str(gitmctl), "--socket", str(prefix / "run/gitmd.sock"), "gpus", "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            )
            if r.returncode == 0:
                break
            time.sleep(0.2)
        assert r.returncode == 0, r.stderr
        assert '"backend": "sim"' in r.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_verifies(deb: Path, short_tmp: Path) -> None:
    root = short_tmp / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    unit = (root / "lib/systemd/system/gitmd.service").read_text()
    # Verify against the extracted binary (the unit names /usr/bin/gitmd, not installed on this host).
    unit = unit.replace("ExecStart=/usr/bin/gitmd", f"ExecStart={root}/usr/bin/gitmd")
    (short_tmp / "gitmd.service").write_text(unit)
    r = subprocess.run(
        ["systemd-analyze", "verify", str(short_tmp / "gitmd.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [line for line in (r.stdout + r.stderr).splitlines() if "gitmd.service" in line]
    assert r.returncode == 0 and not problems, r.stdout + r.stderr
