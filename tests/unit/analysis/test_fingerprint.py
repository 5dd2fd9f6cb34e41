"""Fingerprints on the real H200 captures (tests/fixtures), and on variants of them.

The labelled benchmark (6 workloads x variants captured on the H200, recall and false matches) is
bench work for a GPU session; these tests pin the properties it relies on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gitmd.analysis.fingerprint import MATCH_THRESHOLD, family, same_workload, signature, similarity
from gitmd.analysis.steps import detect
from gitmd.capture import capture_file
from gitmd.capture.decode import Decoded

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def train() -> Decoded:
    return capture_file.loads(FIXTURES / "capture-torch-train.npz").processes[0].records


def sig(r: Decoded):  # type: ignore[no-untyped-def]
    k = r.kernels
    s = signature(r, detect(k["name_id"], k["start_ns"]))
    assert s is not None
    return s


@pytest.mark.parametrize(
    ("name", "fam"),
    [
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(x)", "gemm"),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 4, true, false>(float*)",
            "softmax_warp_forward",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
            "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, x)",
            "elementwise:MulFunctor",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, "
            "at::native::CUDAFunctorOnSelf_add<float>, x>(int)",
            "elementwise:CUDAFunctorOnSelf_add",
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(x)", "reduce_kernel"),
        ("gitm_probe_kernel(float*, int)", "gitm_probe_kernel"),
    ],
)
def test_family_folds_sizes_and_templates(name: str, fam: str) -> None:
    assert family(name) == fam


def test_training_step_signature() -> None:
    s = sig(train())
    kernels = [f for f in s.sequence if f != "sync" and not f.startswith("copy:")]
    assert len(kernels) == 24
    assert s.sequence.count("gemm") >= 6
    assert abs(sum(s.shares.values()) - 1.0) < 1e-9
    assert similarity(s, s) == pytest.approx(1.0)


def test_batch_size_change_still_matches() -> None:
    """cuBLAS picks other GEMM kernels for other shapes, and GEMMs take a larger share of the step."""
    r = train()
    names = {
        i: n.replace("tilesize64x64x8", "tilesize128x128x8").replace("64x64_8x5", "128x128_8x3")
        for i, n in r.names.items()
    }
    k = r.kernels.copy()
    gemm = np.isin(k["name_id"], [i for i, n in names.items() if family(n) == "gemm"])
    dur = k["end_ns"] - k["start_ns"]
    k["end_ns"] = k["start_ns"] + np.where(gemm, dur * 2, dur)
    variant = dataclasses.replace(r, kernels=k, names=names)
    a, b = sig(r), sig(variant)
    assert similarity(a, b) >= MATCH_THRESHOLD and same_workload(a, b)


def test_restart_with_other_name_ids_is_identical() -> None:
    r = train()
    shift = {i: i + 1000 for i in r.names}
    k = r.kernels.copy()
    k["name_id"] = k["name_id"] + 1000
    restarted = dataclasses.replace(r, kernels=k, names={shift[i]: n for i, n in r.names.items()})
    assert similarity(sig(r), sig(restarted)) == pytest.approx(1.0)


def test_different_programs_do_not_match() -> None:
    signatures = [sig(train())]
    for f in ("capture-cuda-known-work.npz", "capture-torch-known-work.npz"):
        for p in capture_file.loads(FIXTURES / f).processes:
            if len(p.records.kernels):
                signatures.append(sig(p.records))
    for i, a in enumerate(signatures):
        for b in signatures[i + 1 :]:
            assert not same_workload(a, b), (a.sequence, b.sequence, similarity(a, b))


def test_no_step_no_signature() -> None:
    r = train()
    assert signature(r, detect(np.arange(10), np.arange(10))) is None
