"""The fingerprint match through the family index (migration 0026) finds exactly what comparing
with every workload finds: on random signatures built to sit near one another (shared families,
perturbed shares and orders), every query gets the same workload, and every pair that matches meets
the index's two conditions (fingerprint.heavy_families)."""

from __future__ import annotations

import random
from pathlib import Path

from gitmd.analysis.fingerprint import MATCH_THRESHOLD, Signature, heavy_families, similarity
from gitmd.store.db import Store
from gitmd.store.library import Library, _best_match
from gitmd.store.library_model import signature_from_json

VOCAB = ["gemm", "elementwise:Add", "elementwise:Mul", "reduce_kernel", "softmax", "layer_norm", "sync",
         "copy:HtoD:pageable", *[f"k{i}" for i in range(24)]]  # fmt: skip


def random_sig(rng: random.Random, base: Signature | None = None) -> Signature:
    if base is not None and rng.random() < 0.7:  # a perturbed copy of a known one: near it
        seq = list(base.sequence)
        if rng.random() < 0.5:
            seq.insert(rng.randrange(len(seq) + 1), rng.choice(VOCAB))
        shares = {f: v * rng.uniform(0.6, 1.4) for f, v in base.shares.items()}
        if len(shares) > 3 and rng.random() < 0.5:  # one family gone, perhaps the largest
            gone = rng.choice(sorted(shares))
            shares.pop(gone)
            seq = [f for f in seq if f != gone] or [next(iter(shares))]
    else:
        fams = rng.sample(VOCAB, rng.randint(1, 10))
        seq = [rng.choice(fams) for _ in range(rng.randint(len(fams), 3 * len(fams)))]
        flat = rng.random() < 0.5  # time spread over many families, or one or two dominating
        shares = {f: rng.uniform(0.5, 1.5) if flat else rng.paretovariate(1.2) for f in fams}
    total = sum(shares.values())
    return Signature(tuple(seq), {f: v / total for f, v in shares.items()})


def test_the_indexed_match_is_the_exhaustive_match(tmp_path: Path) -> None:
    rng = random.Random(2026)
    lib = Library(Store(tmp_path / "g.db"))
    made: list[Signature] = []
    for i in range(400):
        sig = random_sig(rng, rng.choice(made) if made else None)
        made.append(sig)
        lib.observe(sig, f"uid:1000 p{i}", f"p{i}", True, owner_uid=1000 if i % 5 else None)
    matched = 0
    with lib.store.transaction() as db:
        every = [
            (w, signature_from_json(t)) for w, t in db.conn.execute("SELECT id, signature FROM workloads")
        ]
        for _ in range(300):
            q = random_sig(rng, rng.choice(made))
            scores = [(similarity(q, s), w) for w, s in every]
            best, wid = max(scores)
            want = wid if best >= MATCH_THRESHOLD else None
            got = _best_match(db, q, 1000)
            if want is None:
                assert got is None
            else:  # ties: any workload as similar as the best
                matched += 1
                assert got is not None and similarity(q, dict(every)[got]) == best
    assert matched > 50  # the queries did exercise matching, not only misses


def test_every_matching_pair_meets_both_index_conditions() -> None:
    rng = random.Random(7)
    pool = [random_sig(rng)]
    for _ in range(600):
        pool.append(random_sig(rng, rng.choice(pool)))
    pairs = 0
    for i, a in enumerate(pool[:250]):
        for b in pool[i + 1 : 250]:
            if similarity(a, b) >= MATCH_THRESHOLD:
                pairs += 1
                assert heavy_families(b) & set(a.shares) and heavy_families(a) & set(b.shares)
    assert pairs > 20
