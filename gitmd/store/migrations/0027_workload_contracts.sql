-- The equivalence contract a user gave once for their later runs of a workload (convergence issue,
-- item 4: consent for numerics-changing levers): a run of theirs whose launch gives no contract is
-- held to this one, so gitmd may try TF32 or cuDNN autotuning on it, its stdout metric compared. A
-- user's consent covers their own runs only (keyed by uid), whoever else runs the same workload.
CREATE TABLE workload_contracts (
    workload_id TEXT NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
    uid INTEGER NOT NULL,
    contract TEXT NOT NULL,
    set_ns INTEGER NOT NULL,
    PRIMARY KEY (workload_id, uid)
);
-- a workload's latest runs (its kept reports for `library show`, its live trials across runs)
CREATE INDEX jobs_workload ON jobs (workload_id, created_ns);
