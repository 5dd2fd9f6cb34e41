"""GPU tests run on a real GPU host only (tests/gpu/run.sh); elsewhere they skip with the reason."""

from __future__ import annotations

import pytest

from tests.integration.conftest import daemon_factory, short_tmp  # noqa: F401 - fixtures


def gpu_count() -> int:
    """NVIDIA GPUs NVML sees here; raises when NVML cannot answer."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def _nvml_reason() -> str | None:
    try:
        n = gpu_count()
    except Exception as e:
        return f"no NVIDIA GPU here ({e})"
    return None if n else "NVML reports 0 GPUs"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _nvml_reason()
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
