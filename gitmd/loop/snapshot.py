"""gitmd's own state for the Prometheus exporter (gitmd/metrics.py), read cheaply at scrape time:
the store's rows counted by state (one GROUP BY per table) and what the loop holds in memory;
nothing is sampled, no window opened."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from gitmd.capture.duty import slowdown_in_window
from gitmd.loop.deps import Deps


@dataclass(frozen=True)
class RunningJob:
    """A job gitmd tracks now (registered or running), with the figures it has of it."""

    job_id: str
    name: str
    step_s: float | None = None  # median step time in its latest window where one was found
    capture_cost_ratio: float | None = None  # gitmd's estimate of what its capture costs the job


@dataclass(frozen=True)
class StateSnapshot:
    """gitmd's own state as plain data: the counts are the store's rows by their state column."""

    paused: bool = False
    jobs: Mapping[str, int] = field(default_factory=dict)  # jobs.state -> rows
    experiments: Mapping[str, int] = field(default_factory=dict)  # experiments.state -> rows
    launch_trials: Mapping[str, int] = field(default_factory=dict)  # launch_trials.state -> rows
    policies: Mapping[str, int] = field(default_factory=dict)  # policies.status -> rows
    interventions: Mapping[str, int] = field(default_factory=dict)  # interventions.state -> rows
    capture_windows: int | None = None  # windows opened since gitmd started; None: capture is off
    running_jobs: tuple[RunningJob, ...] = ()
    # the fleet library's sync ([fleet]; None when off): pushed, pulled, refused, errors (counters
    # since the store was made), outbox (waiting), seconds since the last round that worked
    fleet: Mapping[str, float] | None = None


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
