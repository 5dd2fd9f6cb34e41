from pathlib import Path

import pytest

from gitmd import config
from gitmd.errors import ConfigError


def parse(text: str) -> config.Config:
    return config.parse(text, Path("/etc/gitmd/gitmd.toml"))


def test_defaults_when_empty() -> None:
    cfg = parse("")
    assert cfg.daemon.socket_path == Path("/run/gitmd/gitmd.sock")
    assert cfg.daemon.db_path == Path("/var/lib/gitmd/gitmd.db")
    assert cfg.daemon.socket_mode == 0o666
    assert cfg.telemetry.backend == "auto"
    assert cfg.telemetry.interval_s == 1.0
    assert cfg.metrics.port == 9402


def test_values_are_read_and_typed() -> None:
    cfg = parse(
        '[daemon]\nstate_dir = "/srv/g"\nsocket_mode = "0600"\n'
        '[telemetry]\nbackend = "sim"\ninterval_s = 2\n'
        "[sim]\ngpus = 3\nthrottle_episodes = [{ gpu = 1, start_s = 5, duration_s = 2 }]\n"
    )
    assert cfg.daemon.state_dir == Path("/srv/g")
    assert cfg.daemon.socket_mode == 0o600
    assert cfg.telemetry.interval_s == 2.0
    assert cfg.sim.gpus == 3
    assert cfg.sim.throttle_episodes[0].gpu == 1
    assert cfg.sim.throttle_episodes[0].reason == "sw_power_cap"


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"line 3"):
        parse('[daemon]\nstate_dir = "/x"\nsocket = \n')


def test_bad_value_names_key_and_line() -> None:
    with pytest.raises(ConfigError) as e:
        parse('# comment\n[telemetry]\nbackend = "auto"\ninterval_s = -1\n')
    assert "telemetry.interval_s" in str(e.value)
    assert "line 4" in str(e.value)
    assert "greater than 0" in str(e.value)


def test_unknown_key_is_an_error_with_line() -> None:
    with pytest.raises(ConfigError, match=r"line 2: metrics.prot is not a known setting"):
        parse("[metrics]\nprot = 9000\n")


def test_unknown_section_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"\[telemetri\] is not a known section"):
        parse("[telemetri]\ninterval_s = 1\n")


def test_wrong_types_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        parse('[metrics]\nport = "9402"\n')
    with pytest.raises(ConfigError, match=r"daemon\.socket_mode"):
        parse("[daemon]\nsocket_mode = 660\n")
    with pytest.raises(ConfigError, match=r"telemetry\.backend"):
        parse('[telemetry]\nbackend = "cuda"\n')
    with pytest.raises(ConfigError, match="interval_s"):
        parse("[telemetry]\ninterval_s = true\n")


def test_sim_items_need_their_required_keys() -> None:
    with pytest.raises(ConfigError, match=r"throttle_episodes \[0\] lacks duration_s"):
        parse("[sim]\nthrottle_episodes = [{ gpu = 0, start_s = 1 }]\n")
    with pytest.raises(ConfigError, match=r"processes\[0\] settings.*|sim.pid|not a known setting"):
        parse("[sim]\nprocesses = [{ gpu = 0, pid = 1, colour = 2 }]\n")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(tmp_path / "nope.toml")


def test_relocated_puts_everything_under_prefix(tmp_path: Path) -> None:
    cfg = parse('[daemon]\nsocket = "/run/x.sock"\n').relocated(tmp_path)
    assert cfg.daemon.state_dir == tmp_path / "lib"
    assert cfg.daemon.runtime_dir == tmp_path / "run"
    assert cfg.daemon.socket_path == tmp_path / "run" / "gitmd.sock"


def test_shipped_configs_parse() -> None:
    root = Path(__file__).resolve().parents[2]
    for path in (root / "packaging" / "gitmd.toml", root / "tools" / "dev.toml"):
        config.load(path)


def test_access_and_remote_sections() -> None:
    cfg = parse(
        '[access]\nread_group = "ops"\nallow_device_levers = true\n'
        '[remote]\nlisten = "0.0.0.0:9443"\ncert = "/c.pem"\nkey = "/k.pem"\nclient_ca = "/ca.pem"\n'
        'subjects = { "slurm-ctl" = "scheduler", "ops-console" = "admin" }\n'
    )
    assert cfg.access.read_group == "ops" and cfg.access.allow_device_levers
    assert cfg.remote.subjects == (("ops-console", "admin"), ("slurm-ctl", "scheduler"))
    assert cfg.auth_socket_path == Path("/run/gitmd/gitmd-auth.sock")
    assert parse("").remote.listen == "" and not parse("").access.allow_device_levers


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[remote]\nlisten = "0.0.0.0:9443"\n', "remote.cert is required"),
        ('[remote]\nlisten = "nohost"\n', "HOST:PORT"),
        ('[remote]\nlisten = "h:99999"\n', "port must be"),
        ('[remote]\nsubjects = { "x" = "root" }\n', "role of 'x'"),
        ("[access]\nallow_device_levers = 1\n", "true or false"),
    ],
)
def test_bad_access_settings(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(text)


def test_the_effective_configuration_is_a_toml_file_gitmd_reads_back() -> None:
    """Hardening issue, item 11: `gitmd --check-config` and `gitmctl status --config` printed
    "key = value" lines that were not TOML."""
    import dataclasses
    import tomllib
    from pathlib import Path

    from gitmd.config import Config, load, parse

    root = Path(__file__).resolve().parents[2]
    text = """
[daemon]
socket_mode = "0660"
keep_days = 0
[remote]
listen = "0.0.0.0:9443"
cert = "/etc/gitmd/tls/server.pem"
key = "/etc/gitmd/tls/server.key"
client_ca = "/etc/gitmd/tls/ca.pem"
subjects = { "slurm-ctl" = "scheduler", "ops \\"night\\"" = "reader" }
[experiments]
live_levers = ["cpu_affinity"]
"""
    for cfg in (Config(), load(root / "packaging" / "gitmd.toml"), parse(text, Path("t.toml"))):
        out = cfg.toml()
        tomllib.loads(out)  # valid TOML
        back = parse(out, Path("back.toml"))
        assert dataclasses.replace(back, source=cfg.source) == cfg


def test_windows_ask_every_kind_but_memset_unless_told() -> None:
    """Memset activity, once enabled, leaves later launches slower for the rest of the process
    (bench/results/2026-12-04-cupti-residual-h200.md): not asked by default, still allowed."""
    kinds = parse("").capture.kinds
    assert "memset" not in kinds
    assert set(kinds) == set(config.CAPTURE_KINDS) - {"memset"}
    assert parse('[capture]\nkinds = ["kernel", "memset"]\n').capture.kinds == ("kernel", "memset")
