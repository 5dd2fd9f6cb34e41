-- What gitmd cost each run (convergence issue, item 3), kept with the ended job as JSON: its capture
-- windows (their seconds, and their cost by gitmd's launch-cost model), what losing trial arms cost
-- it (measured: the arm's step against its baseline), a launch trial's losing arm run against the
-- workload's plain runs, and their share of the run. '' : not known (ended before this migration).
ALTER TABLE jobs ADD COLUMN cost TEXT NOT NULL DEFAULT '';
