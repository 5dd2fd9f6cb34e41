-- Candidates for a fingerprint match found by index, not by reading every workload (library.py
-- _best_match): each workload's kernel families, its heavy ones marked (fingerprint.heavy_families:
-- a signature meeting none of them cannot match). A joining node adopting 20,000 fleet policies
-- spent most of its time comparing each with every workload of its user. Workloads are indexed when
-- first looked at (families_indexed), so those made before this migration are too.
CREATE TABLE workload_families (
    family TEXT NOT NULL,
    workload_id TEXT NOT NULL,
    heavy INTEGER NOT NULL,
    PRIMARY KEY (family, workload_id)
) WITHOUT ROWID;
CREATE INDEX workload_families_heavy ON workload_families (family) WHERE heavy = 1;
ALTER TABLE workloads ADD COLUMN families_indexed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX workloads_unindexed ON workloads (families_indexed) WHERE families_indexed = 0;
