"""`gitmctl levers` over the real socket: the daemon's catalog (ListLevers), in full as JSON, as a
table, and one lever at a time."""

from __future__ import annotations

import json

from gitmd.analysis.causes import LEVERS
from gitmd.levers.registry import CATALOG
from tests.integration.conftest import Daemon, ctl, ctl_json


def test_levers_lists_the_catalog(daemon: Daemon) -> None:
    levers = ctl_json(daemon.socket, "levers")["levers"]
    assert [lv["name"] for lv in levers] == list(CATALOG)
    by = {lv["name"]: lv for lv in levers}
    for lv in levers:
        assert lv["summary"] and lv["changes"], lv["name"]
        assert set(lv["causes"]) == {c for c, names in LEVERS.items() if lv["name"] in names}
    threads = by["cpu_threads"]
    assert (threads["kind"], threads["risk"], threads["launch"], threads["live"]) == (
        "launch",
        "safe",
        True,
        False,
    )
    assert threads["env"] == {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}
    assert json.loads(threads["defaults_json"]) == {"value": 4}
    tf32 = by["tf32_override"]
    assert tf32["risk"] == "numerics-changing" and tf32["causes"] == ["fp32_gemm"]
    assert by["alloc_keep_cache"]["env"]["GITM_SITE"]  # gitmd's site directory, as in a launch plan
    assert by["alloc_keep_cache"]["counterpart"] == "alloc_keep_cache_live"
    affinity = by["cpu_affinity"]
    assert affinity["kind"] == "live-host" and affinity["live"] and not affinity["launch"]
    assert affinity["env"] == {} and affinity["causes"] == ["host_contention", "launch_bound", "sync_stall"]
    assert by["power_limit"]["kind"] == "device"

    table = ctl(daemon.socket, "levers").stdout
    assert table.splitlines()[0].split() == ["LEVER", "KIND", "RISK", "CAUSES", "CHANGES"]
    assert "env OMP_NUM_THREADS=4 MKL_NUM_THREADS=4" in table
    assert "host_contention,launch_bound,sync_stall" in table


def test_levers_by_name(daemon: Daemon) -> None:
    (one,) = ctl_json(daemon.socket, "levers", "sync_spin")["levers"]
    assert one["name"] == "sync_spin" and one["causes"] == ["sync_stall"] and one["host_only"]
    text = ctl(daemon.socket, "levers", "alloc_keep_cache", "tf32_override").stdout
    assert text.startswith("alloc_keep_cache: launch, memory-risk (at launch)")
    assert "the same change live: alloc_keep_cache_live" in text
    assert "tf32_override: launch, numerics-changing" in text and "selected by: fp32_gemm" in text
    assert "environment: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1" in text
    r = ctl(daemon.socket, "levers", "nope", check=False)
    assert r.returncode == 4 and "no lever nope" in r.stderr
