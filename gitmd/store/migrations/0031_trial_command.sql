-- A launch trial's runs are of one command line (launch_key.command_digest of the run that planned
-- it): its pairs compare run lengths, and a workload's command lines may do other work (steps,
-- batch, data), so a pair of two of them compared the work, not the lever. Runs of the workload's
-- other command lines get no arm; ``skipped`` counts them since the trial's last run, and a trial
-- whose command line stops coming is abandoned (gitmd/loop/trials.py).
--
-- Trials already here have no command line: the next run they get binds them to its own.
ALTER TABLE launch_trials ADD COLUMN command TEXT NOT NULL DEFAULT '';
ALTER TABLE launch_trials ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
