"""The Kubernetes manifests, parsed and checked field by field (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gitmd import config

K8S = Path(__file__).resolve().parents[3] / "packaging" / "k8s"


def docs(name: str) -> dict[str, Any]:
    with open(K8S / name) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d}


def test_daemonset_has_what_gitmd_needs_on_a_node() -> None:
    d = docs("gitmd.yaml")
    assert set(d) == {"Namespace", "ConfigMap", "DaemonSet"}
    ds = d["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    [c] = spec["containers"]
    assert not c["image"].endswith(":latest") and ":" in c["image"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    assert spec["runtimeClassName"] == "nvidia"
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert volumes["run"]["hostPath"]["path"] == "/run/gitmd" and mounts["run"] == "/run/gitmd"
    assert volumes["state"]["hostPath"]["path"] == "/var/lib/gitmd" and mounts["state"] == "/var/lib/gitmd"
    assert volumes["config"]["configMap"]["name"] == d["ConfigMap"]["metadata"]["name"]
    assert mounts["config"] == "/etc/gitmd" and c["command"][-1] == "/etc/gitmd/gitmd.toml"
    limits, requests = c["resources"]["limits"], c["resources"]["requests"]
    assert {"cpu", "memory"} <= set(limits) and {"cpu", "memory"} <= set(requests)
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        cmd = probe["exec"]["command"]
        assert cmd[0] == "gitmctl" and cmd[-1] == "health" and "/run/gitmd/gitmd.sock" in cmd
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert {"CHOWN", "SYS_NICE"} <= set(sc["capabilities"]["add"])
    assert ds["metadata"]["namespace"] == d["Namespace"]["metadata"]["name"]
    assert (
        ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_configmap_is_a_valid_gitmd_config_that_shares_the_shim() -> None:
    d = docs("gitmd.yaml")
    cfg = config.parse(d["ConfigMap"]["data"]["gitmd.toml"], Path("configmap:gitmd.toml"))
    assert cfg.daemon.runtime_dir == Path("/run/gitmd")
    assert cfg.capture.shim_path is not None and cfg.capture.shim_path.parent == Path("/run/gitmd/lib")
    assert cfg.metrics.port == 9402 and not cfg.access.allow_device_levers
    [init] = d["DaemonSet"]["spec"]["template"]["spec"]["initContainers"]
    assert str(cfg.capture.shim_path) in " ".join(init["command"])
    assert str(cfg.capture.shim_path.parent / "libgitm_guard.so") in " ".join(init["command"])  # beside it
    assert str(cfg.capture.shim_path.parent / "libgitm_clock.so") in " ".join(init["command"])  # and this
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/run/gitmd"}


def test_a_job_pod_opts_in_through_the_launcher_and_the_shared_directory() -> None:
    job = docs("job-example.yaml")["Job"]
    spec = job["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert c["command"][0] == "gitm-launch" and "--" in c["command"]
    assert {"name": "GITMD_SOCKET", "value": "/run/gitmd/gitmd.sock"} in c["env"]
    [vol] = spec["volumes"]
    assert vol["hostPath"]["path"] == "/run/gitmd"
    assert c["volumeMounts"] == [{"name": vol["name"], "mountPath": "/run/gitmd"}]
    assert spec["securityContext"]["runAsUser"] != 0


def test_the_fleet_store_manifest_and_the_config_it_documents() -> None:
    """The fleet library's PostgreSQL (packaging/k8s/fleet-postgres.yaml): a StatefulSet with its
    own volume and a Service in gitmd's namespace, the password from a secret, never as root; and
    the [fleet] lines its header gives are a config gitmd accepts."""
    import re

    d = docs("fleet-postgres.yaml")
    sts, svc = d["StatefulSet"], d["Service"]
    assert sts["metadata"]["namespace"] == svc["metadata"]["namespace"] == "gitmd"
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert "secretKeyRef" in env["POSTGRES_PASSWORD"]["valueFrom"]
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == c["volumeMounts"][0]["name"]
    assert svc["spec"]["ports"][0]["port"] == 5432
    header = (K8S / "fleet-postgres.yaml").read_text()
    lines = [m.group(1) for m in re.finditer(r"^#   (\[fleet\]|\w+ = .*?)(?:[ \t]+#.*)?$", header, re.M)]
    cfg = config.parse("\n".join(lines), Path("fleet-postgres.yaml"))
    assert cfg.fleet.url.startswith("postgresql://gitmd@gitmd-fleet.gitmd.svc")
    assert cfg.fleet.password_file is not None and cfg.fleet.sslmode == "require"
