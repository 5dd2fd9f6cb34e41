"""The systemd unit: what operators expect of a service (notify, restart on failure, reload)."""

from __future__ import annotations

import configparser
from pathlib import Path

UNIT = Path(__file__).resolve().parents[3] / "packaging" / "systemd" / "gitmd.service"


def test_the_unit_reloads_with_sighup_and_restarts_on_failure() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(UNIT)
    service = unit["Service"]
    assert service["Type"] == "notify" and service["Restart"] == "on-failure"
    # gitmd handles SIGHUP (Daemon.reload, tests/integration/test_daemon.py): `systemctl reload gitmd`
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
