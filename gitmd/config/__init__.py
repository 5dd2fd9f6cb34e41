"""gitmd's configuration: TOML at /etc/gitmd/gitmd.toml (or --config), typed and validated.

Every error names the file, the key and its line; unknown keys are errors, so a typo never passes
silently. Every path is relocatable, for tests and for the embedded default under ./var/.

sections: the typed sections and their defaults; checks: the values each key may take;
loader: parsing and validating a file. Import from here: ``from gitmd.config import Config``.
"""

from gitmd.config.checks import Checker
from gitmd.config.loader import DEFAULT_CONFIG_PATH, load, parse
from gitmd.config.sections import (
    BACKENDS,
    CAPTURE_KINDS,
    LAUNCH_LEVERS,
    LIVE_LEVERS,
    LOG_LEVELS,
    REMOTE_ROLES,
    AccessConfig,
    CaptureConfig,
    Config,
    DaemonConfig,
    ExperimentsConfig,
    FleetConfig,
    MetricsConfig,
    RemoteConfig,
    SimConfig,
    SimProcess,
    TelemetryConfig,
    ThrottleEpisode,
)

__all__ = [
    "BACKENDS",
    "CAPTURE_KINDS",
    "DEFAULT_CONFIG_PATH",
    "LAUNCH_LEVERS",
    "LIVE_LEVERS",
    "LOG_LEVELS",
    "REMOTE_ROLES",
    "AccessConfig",
    "CaptureConfig",
    "Checker",
    "Config",
    "DaemonConfig",
    "ExperimentsConfig",
    "FleetConfig",
    "MetricsConfig",
    "RemoteConfig",
    "SimConfig",
    "SimProcess",
    "TelemetryConfig",
    "ThrottleEpisode",
    "load",
    "parse",
]
