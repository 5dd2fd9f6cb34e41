-- The equivalence contract a workload's owner gave once for its later runs (convergence issue, item
-- 4: consent for numerics-changing levers): a run whose launch gives no contract is held to this
-- one, so gitmd may try TF32 or cuDNN autotuning on it, outputs compared. JSON as Contract.to_json.
CREATE TABLE workload_contracts (
    workload_id TEXT PRIMARY KEY REFERENCES workloads (id) ON DELETE CASCADE,
    contract TEXT NOT NULL,
    set_by TEXT NOT NULL DEFAULT '',
    set_ns INTEGER NOT NULL
);
