-- A program's run history is asked on every registration (gitmd/jobs/history.py). Through the launch
-- key's index alone, each question read every run of the key, at 40,000 runs of one key (one a
-- minute for four weeks; bench/results/2026-12-05-history-queries-cpu.md):
-- - of one exact command line (what a run's length is compared with, a launch trial's pairs, the
--   backoff of a launch not yet known): 10-12 ms a question;
-- - the observation backoff (how many runs of the key, or of the workload, had a window): 7-8 ms.
CREATE INDEX jobs_command_line ON jobs (launch_key, command, cwd, created_ns);
CREATE INDEX jobs_observed_by_key ON jobs (launch_key, created_ns, state) WHERE windows > 0;
CREATE INDEX jobs_observed_by_workload ON jobs (workload_id, created_ns, state) WHERE windows > 0;
