"""The frameworks a job's process runs, from its mappings and its site-packages' dist-info names."""

from __future__ import annotations

import os
from pathlib import Path

from gitmd.jobs.frameworks import MAX_FRAMEWORKS, frameworks_of, maps_library


def _maps(*paths: str) -> str:
    return "".join(f"7f00-7f10 r-xp 00000000 08:01 {i} {p}\n" for i, p in enumerate(paths, 1))


def test_the_frameworks_a_process_has_mapped_with_their_versions(tmp_path: Path) -> None:
    site = tmp_path / "venv/lib/python3.12/site-packages"
    for dist, tops in (
        ("torch-2.11.0+cu130", "torch\ntorchgen\n"),
        ("cupy_cuda12x-13.6.0", "cupy\ncupy_backends\ncupyx\n"),
        ("nvidia_cublas_cu12-12.8.4.1", "nvidia\n"),
        ("nvidia_cudnn_cu12-9.10.2.21", "nvidia\n"),
        ("numpy-2.3.1", None),  # no top_level.txt: its own name
        ("requests-2.32.0", "requests\n"),  # installed, not mapped: not listed
    ):
        d = site / f"{dist}.dist-info"
        d.mkdir(parents=True)
        if tops is not None:
            (d / "top_level.txt").write_text(tops)
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "maps").write_text(
        _maps(
            f"{site}/torch/lib/libtorch_cuda.so",
            f"{site}/torch/lib/libc10.so",
            f"{site}/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so",
            f"{site}/nvidia/cublas/lib/libcublas.so.12",
            f"{site}/numpy.libs/libscipy_openblas64_-ff651d7f.so",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        + "7f20-7f30 rw-p 00000000 00:00 0 \n"  # anonymous mapping: no path
    )
    assert frameworks_of(42, proc) == {
        "cupy_cuda12x": "13.6.0",
        "numpy": "2.3.1",
        "nvidia_cublas_cu12": "12.8.4.1",
        "torch": "2.11.0+cu130",
    }
    assert frameworks_of(43, proc) == {}  # no such process


def test_what_a_user_planted_in_their_site_packages_is_not_followed_or_trusted(tmp_path: Path) -> None:
    """gitmd reads these folders as root: a dist-info reached through a link, a top_level.txt that is
    a link (to a file only root may read), and names or versions that are not plain are left out."""
    site = tmp_path / "site-packages"
    site.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("torch\n")
    real = site / "torch-2.0.dist-info"
    real.mkdir()
    os.symlink(secret, real / "top_level.txt")  # a link: not read, the name decides (torch)
    elsewhere = tmp_path / "elsewhere" / "cupy-1.0.dist-info"
    elsewhere.mkdir(parents=True)
    os.symlink(elsewhere, site / "cupy-1.0.dist-info")  # a linked dist-info: skipped
    (site / "jax-$(id).dist-info").mkdir()  # not a plain version
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "maps").write_text(_maps(f"{site}/torch/x.so", f"{site}/cupy/y.so", f"{site}/jax/z.so"))
    assert frameworks_of(7, proc) == {"torch": "2.0"}


def test_whether_a_process_maps_a_library_is_known_only_from_a_list_below_its_cap() -> None:
    """maps_library: names as the module normalises them; None with nothing read or a list at
    MAX_FRAMEWORKS (it may have left the library out: choose.launch then rules nothing out)."""
    assert maps_library({"cupy-cuda12x": "13.6.0", "numpy": "2.2.6"}, "torch") is False
    assert maps_library({"Torch": "2.11.0+cu130"}, "torch") is True
    assert maps_library({"jax_cuda12_plugin": "0.7.0"}, "jax-cuda12-plugin") is True
    assert maps_library({}, "torch") is None
    assert maps_library({f"nvidia-lib{i:02d}": "12.0" for i in range(MAX_FRAMEWORKS)}, "torch") is None
