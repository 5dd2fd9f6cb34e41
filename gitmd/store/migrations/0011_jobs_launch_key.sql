-- The earlier runs of a launch key, newest first: how long a recurring job ran before (the duty
-- cycle holds a known-long job's first window until its processes have settled).
CREATE INDEX jobs_launch_key ON jobs (launch_key, created_ns);
