-- A launch trial's pair is two runs of one command line (launch_key.command_digest, kept in each run
-- of ``runs``): a pair compares run lengths, and a workload's command lines may do other work
-- (steps, batch, data), so a pair of two of them compared the work, not the lever. While a pair is
-- half done, launches of the workload's other command lines get no arm; ``skipped`` counts them
-- once the half pair's run has ended, and after enough of them that run is left unpaired
-- (gitmd/experiments/runs.py). Runs recorded before this get their command line from the jobs
-- table the next time their trial hands out an arm.
ALTER TABLE launch_trials ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
