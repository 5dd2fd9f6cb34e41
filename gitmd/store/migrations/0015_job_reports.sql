-- A job's last attribution reports, kept when it ends (gitmd/analysis/report_codec.py JSON), so that
-- `gitmctl explain` on an ended job still shows why it was slow. At most REPORTS_KEPT_ENDED a job.
CREATE TABLE job_reports (
    job_id TEXT NOT NULL,
    window_id INTEGER NOT NULL,
    report TEXT NOT NULL,
    PRIMARY KEY (job_id, window_id)
);
