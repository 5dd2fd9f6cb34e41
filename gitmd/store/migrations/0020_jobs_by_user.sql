-- daemon.max_jobs_per_user counts a user's open jobs at every registration: one indexed lookup.
CREATE INDEX jobs_uid_state ON jobs (uid, state);
