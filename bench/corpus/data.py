#!/usr/bin/env python3
"""Synthetic data for the corpus programs that read files (see manifest.toml, field `data`).

Writes a small ImageFolder tree of PNG images, deterministic from a fixed seed:

    bench/corpus/src/_data/imagefolder/{train,validation}/class_XX/img_NNNNN.png

used by timm's train.py and validate.py (DataLoader-heavy entries: PIL decode + augmentation in
worker processes). Each image is a smooth random colour field (a few low-frequency cosines), so
PNG (Sub filter) compresses it while decoding and augmenting still cost real CPU time (3200 images,
about 39 MiB, ~15 s to write). Nothing is downloaded.

    python3 bench/corpus/data.py               # write (idempotent: a stamp records the settings)
    python3 bench/corpus/data.py --dest DIR    # elsewhere (default bench/corpus/src/_data)

Python 3.11+ and numpy (PNG written with zlib/struct, no PIL), so it also runs on the GPU host.

Where PyTorch is installed it also writes `src/_data/resnet50-random-10.pth`: a random-initialised
timm resnet50 with 10 classes (torch.manual_seed(SEED)), the checkpoint validate.py is given —
without one it treats the model as pretrained and downloads weights, which nothing here may do.
Without PyTorch (this CPU machine) that step is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_DEST = HERE / "src" / "_data"
SEED = 2026
SETTINGS = {
    "seed": SEED,
    "size": 112,
    "classes": 10,
    "per_class": {"train": 256, "validation": 64},
    "format": 2,
}
STAMP = ".gitm-data.json"


def png_bytes(width: int, height: int, rows: list[bytes]) -> bytes:
    """An 8-bit RGB PNG from `rows` (each width*3 bytes)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    raw = b"".join(b"\x01" + r for r in rows)  # filter type 1 (Sub): rows hold left differences
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def image(rng: np.random.Generator, size: int, label: int) -> bytes:
    # per-channel sum of three cosines; the class shifts the base colour so labels are learnable
    yy, xx = np.mgrid[0:size, 0:size] * (2 * np.pi / size)
    out = np.empty((size, size, 3), dtype=np.float32)
    for c in range(3):
        v = np.full((size, size), ((label * 37 + 80 * c) % 256) * 0.5 + 64, dtype=np.float32)
        for fx, fy, ph in rng.uniform((0.5, 0.5, 0), (3.0, 3.0, 2 * np.pi), size=(3, 3)):
            v += 20 * np.cos(fx * xx + fy * yy + ph)
        out[..., c] = v
    pixels = np.clip(out, 0, 255).astype(np.uint8).reshape(size, size * 3)
    sub = pixels.copy()
    sub[:, 3:] = pixels[:, 3:] - pixels[:, :-3]  # uint8 wrap-around, as the Sub filter defines
    return png_bytes(size, size, [sub[y].tobytes() for y in range(size)])


def write(dest: Path) -> str:
    root = dest / "imagefolder"
    stamp = root / STAMP
    if stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == SETTINGS:
                return "up to date"
        except (OSError, ValueError):
            pass
    if root.exists():
        shutil.rmtree(root)
    rng = np.random.default_rng(SEED)
    n = 0
    for split, per_class in SETTINGS["per_class"].items():
        for label in range(SETTINGS["classes"]):
            d = root / split / f"class_{label:02d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                (d / f"img_{i:05d}.png").write_bytes(image(rng, SETTINGS["size"], label))
                n += 1
    stamp.write_text(json.dumps(SETTINGS, indent=1) + "\n")
    return f"wrote {n} images"


CHECKPOINT = "resnet50-random-10.pth"


def checkpoint(dest: Path) -> str:
    """The random-initialised resnet50 checkpoint for validate.py, from the materialised timm."""
    out = dest / CHECKPOINT
    if out.exists():
        return "up to date"
    try:
        import torch
    except ImportError:
        return "skipped: no PyTorch here (validate.py needs it on the GPU host)"
    sys.path.insert(0, str(dest.parent / "huggingface+pytorch-image-models"))
    import timm

    torch.manual_seed(SEED)
    model = timm.create_model("resnet50", pretrained=False, num_classes=SETTINGS["classes"])
    tmp = out.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    tmp.replace(out)
    return f"wrote {out.stat().st_size / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = ap.parse_args(argv)
    state = write(args.dest)
    size = sum(f.stat().st_size for f in (args.dest / "imagefolder").rglob("*") if f.is_file())
    print(f"imagefolder: {state}, {size / 2**20:.1f} MiB in {args.dest / 'imagefolder'}")
    print(f"{CHECKPOINT}: {checkpoint(args.dest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
