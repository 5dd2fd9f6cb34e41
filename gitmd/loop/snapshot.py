"""gitmd's own state for the Prometheus exporter (gitmd/metrics.py), read cheaply at scrape time:
the store's rows counted by state (one GROUP BY per table) and what the loop holds in memory;
nothing is sampled, no window opened."""

from __future__ import annotations

import time

from gitmd.capture.duty import slowdown_in_window
from gitmd.loop.deps import Deps
from gitmd.metrics import RunningJob, StateSnapshot

COUNTED = (
    ("jobs", "state"),
    ("experiments", "state"),
    ("launch_trials", "state"),
    ("policies", "status"),
    ("interventions", "state"),
)


def snapshot(d: Deps) -> StateSnapshot:
    counts: dict[str, dict[str, int]] = {}
    with d.jobs.store.reading() as db:
        for table, column in COUNTED:
            rows = db.conn.execute(f"SELECT {column}, COUNT(*) FROM {table} GROUP BY {column}")
            counts[table] = {str(k): int(n) for k, n in rows}
    running = []
    for job in d.jobs.list(include_exited=False):
        st = d.states.get(job.id)
        steps = st.steps if st is not None else None
        step_s = steps.stats.median_ns / 1e9 if steps is not None and steps.stats.found else None
        # while its observation lasts CUPTI stays attached between windows at about a window's cost
        # (capture/duty.py): gitmd's model of it, from the last window's launch rate; once the
        # observation has ended that cost is not measured: left out
        jc = d.capture.get(job.id) if d.capture is not None else None
        w = jc.last if jc is not None else None
        cost = None
        if w is not None and st is not None and not st.observed:
            kernels = sum(len(p.records.kernels) for p in w.processes)
            window_s = (w.end_real_ns - w.start_real_ns) / 1e9
            cost = min(1.0, slowdown_in_window(kernels, window_s, d.config.capture.launch_cost_us))
        running.append(RunningJob(job.id, job.name, step_s, cost))
    fleet = None
    if d.fleet_miss is not None:  # [fleet] on
        with d.jobs.store.reading() as db:
            r = db.conn.execute(
                "SELECT pushed, pulled, refused, errors, last_ok_ns FROM fleet_state"
            ).fetchone()
            outbox = db.conn.execute("SELECT COUNT(*) FROM fleet_outbox").fetchone()[0]
        fleet = {"pushed": r[0], "pulled": r[1], "refused": r[2], "errors": r[3], "outbox": outbox}
        if r[4]:
            fleet["lag_seconds"] = max(0.0, (time.time_ns() - r[4]) / 1e9)
    return StateSnapshot(
        paused=d.pause.on,
        jobs=counts["jobs"],
        experiments=counts["experiments"],
        launch_trials=counts["launch_trials"],
        policies=counts["policies"],
        interventions=counts["interventions"],
        capture_windows=d.capture.windows_opened if d.capture is not None else None,
        running_jobs=tuple(running),
        fleet=fleet,
    )
