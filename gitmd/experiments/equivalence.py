"""Equivalence contracts: what must hold for a change to leave a job's outputs unchanged.

Checked at registration (a contract that cannot be evaluated is refused there, not discovered in
the middle of an experiment); evaluated by the experiment engine.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gitmd.errors import InvalidArgumentError

KINDS = ("exit_status", "payload", "stdout_metric", "output_file")
MAX_CHECKS = 32


@dataclass(frozen=True)
class Check:
    kind: str
    rtol: float = 0.0
    atol: float = 0.0
    regex: str = ""
    path: str = ""
    compare: str = ""


@dataclass(frozen=True)
class Contract:
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def effective(self) -> tuple[Check, ...]:
        """The checks that apply: the default when none were given."""
        return self.checks or (Check("exit_status"), Check("payload", rtol=1e-5, atol=1e-8))

    def to_json(self) -> dict[str, Any]:
        return {"checks": [c.__dict__ for c in self.checks]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Contract:
        return Contract(tuple(Check(**c) for c in d.get("checks", [])))


def validate(checks: list[Check]) -> Contract:
    if len(checks) > MAX_CHECKS:
        raise InvalidArgumentError(f"contract: at most {MAX_CHECKS} checks")
    for i, c in enumerate(checks):
        where = f"contract check {i} ({c.kind or 'no kind'})"
        if c.kind not in KINDS:
            raise InvalidArgumentError(f"{where}: kind must be one of {', '.join(KINDS)}")
        for name, v in (("rtol", c.rtol), ("atol", c.atol)):
            if not math.isfinite(v) or v < 0:
                raise InvalidArgumentError(f"{where}: {name} must be a finite number of at least 0")
        if c.kind == "stdout_metric":
            try:
                rx = re.compile(c.regex)
            except re.error as e:
                raise InvalidArgumentError(f"{where}: regex does not compile: {e}") from None
            if rx.groups != 1 or len(c.regex) > 1000:
                raise InvalidArgumentError(f"{where}: regex must have exactly one capture group (the number)")
        if c.kind == "output_file":
            if not c.path.startswith("/") or "\0" in c.path or len(c.path) > 4096:
                raise InvalidArgumentError(f"{where}: path must be absolute")
            if c.compare not in ("checksum", "numeric"):
                raise InvalidArgumentError(f"{where}: compare must be checksum or numeric")
    return Contract(tuple(checks))


# -- evaluation ----------------------------------------------------------------------------------
MAX_COMPARED = 100_000  # numbers per check


@dataclass(frozen=True)
class Outputs:
    """What one run (or one window of a live job) produced, for the contract to compare."""

    exit_status: int | None = None  # None: still running (live experiments)
    stdout: str = ""
    payloads: tuple[float, ...] = ()  # scalar device-to-host samples, in order (e.g. the loss)
    files: dict[str, bytes] = field(default_factory=dict)  # output_file path -> contents
    # output_file path -> the SHA-256 of its contents, when only that was given (a client that
    # read the file itself): enough for a "checksum" check, not for a "numeric" one
    digests: dict[str, bytes] = field(default_factory=dict)
    # stdout_metric regex -> the numbers it found, when the launcher scanned stdout itself (runs
    # launched by `gitmctl run`, whose stdout gitmd never sees); otherwise ``stdout`` is parsed
    metrics: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def sha256(self, path: str) -> bytes | None:
        if path in self.files:
            return hashlib.sha256(self.files[path]).digest()
        return self.digests.get(path)

    def metric(self, regex: str) -> np.ndarray:
        if regex in self.metrics:
            return np.asarray(self.metrics[regex], dtype=np.float64)
        rx = re.compile(regex)
        return np.array([float(m) for m in rx.findall(self.stdout) if is_number(m)], dtype=np.float64)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    failures: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()  # what was compared
    numbers_checked: bool = False  # some check compared numbers (a numerics-changing lever needs it)


def _numbers_of_text(data: bytes) -> np.ndarray:
    if data[:6] == b"\x93NUMPY":
        import io

        return np.asarray(np.load(io.BytesIO(data), allow_pickle=False), dtype=np.float64).reshape(-1)
    return np.array([float(x) for x in data.decode("utf-8", "replace").split()], dtype=np.float64)


def _compare(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when they agree; else why not. NaN or Inf in the treatment always fails."""
    if not np.all(np.isfinite(b)):
        return f"{name}: NaN or Inf in the treatment"
    if not np.all(np.isfinite(a)):
        return f"{name}: NaN or Inf in the baseline (nothing to compare against)"
    n = min(len(a), len(b), MAX_COMPARED)
    if n == 0:
        return f"{name}: nothing to compare ({len(a)} vs {len(b)} values)"
    a, b = a[:n], b[:n]
    bad = np.abs(a - b) > atol + rtol * np.abs(a)
    if bad.any():
        i = int(np.argmax(bad))
        return f"{name}: value {i} differs: {a[i]!r} vs {b[i]!r} (rtol {rtol:g}, atol {atol:g})"
    return None


def evaluate(contract: Contract, baseline: Outputs, treatment: Outputs) -> Verdict:
    failures: list[str] = []
    checked: list[str] = []
    numbers = False
    for c in contract.effective:
        if c.kind == "exit_status":
            if treatment.exit_status is None or baseline.exit_status is None:
                continue  # a live job has no exit status yet
            checked.append("exit status")
            if treatment.exit_status != baseline.exit_status:
                failures.append(f"exit status {treatment.exit_status}, baseline {baseline.exit_status}")
        elif c.kind == "payload":
            a = np.asarray(baseline.payloads, dtype=np.float64)
            b = np.asarray(treatment.payloads, dtype=np.float64)
            if not np.all(np.isfinite(b)):
                failures.append("payload samples: NaN or Inf in the treatment")
                continue
            if len(a) == 0 or len(b) == 0:
                continue  # the job copies nothing small to the host: nothing to compare
            checked.append(f"{min(len(a), len(b))} payload samples")
            numbers = True
            why = _compare("payload samples", a, b, c.rtol, c.atol)
            if why:
                failures.append(why)
        elif c.kind == "stdout_metric":
            a, b = baseline.metric(c.regex), treatment.metric(c.regex)
            checked.append(f"stdout metric /{c.regex}/")
            numbers = True
            why = _compare(f"stdout metric /{c.regex}/", a, b, c.rtol, c.atol)
            if why:
                failures.append(why)
        elif c.kind == "output_file":
            if c.compare == "checksum":
                da, db = baseline.sha256(c.path), treatment.sha256(c.path)
                if da is None or db is None:
                    failures.append(f"output file {c.path}: missing")
                    continue
                checked.append(f"output file {c.path} ({c.compare})")
                if da != db:
                    failures.append(f"output file {c.path}: checksum differs")
                numbers = True  # bit-identical output: any change of numbers would show
            else:
                if c.path not in baseline.files or c.path not in treatment.files:
                    failures.append(f"output file {c.path}: missing")
                    continue
                checked.append(f"output file {c.path} ({c.compare})")
                fa, fb = baseline.files[c.path], treatment.files[c.path]
                numbers = True
                try:
                    why = _compare(
                        f"output file {c.path}", _numbers_of_text(fa), _numbers_of_text(fb), c.rtol, c.atol
                    )
                except (ValueError, TypeError) as e:  # TypeError: an npy array of records
                    why = f"output file {c.path}: not numbers ({e})"
                if why:
                    failures.append(why)
    return Verdict(not failures, tuple(failures), tuple(checked), numbers)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
