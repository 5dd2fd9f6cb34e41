-- Each user's bytes in the jobs table, kept by triggers (hardening issue: per-user stored bytes). A
-- registration beyond daemon.stored_bytes_per_user first deletes that user's oldest ended jobs, and
-- is refused when their open jobs alone hold that much (gitmd/jobs/registry.py): one user registering
-- 1-MiB commands in a loop filled the store for everyone until keep_days (90) passed.
CREATE TABLE user_bytes (
    uid INTEGER PRIMARY KEY,
    bytes INTEGER NOT NULL DEFAULT 0
);
INSERT INTO user_bytes (uid, bytes)
    SELECT uid, SUM(ifnull(length(CAST(name AS BLOB)), 0) + ifnull(length(CAST(command AS BLOB)), 0) + ifnull(length(CAST(cwd AS BLOB)), 0) + ifnull(length(CAST(launch_key AS BLOB)), 0) + ifnull(length(CAST(workload_id AS BLOB)), 0) + ifnull(length(CAST(runtime_dir AS BLOB)), 0) + ifnull(length(CAST(gpus AS BLOB)), 0) + ifnull(length(CAST(contract AS BLOB)), 0) + ifnull(length(CAST(scheduler_job_id AS BLOB)), 0) + ifnull(length(CAST(steps AS BLOB)), 0) + ifnull(length(CAST(crash AS BLOB)), 0) + ifnull(length(CAST(phase AS BLOB)), 0) + ifnull(length(CAST(cost AS BLOB)), 0)) FROM jobs GROUP BY uid;
CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO user_bytes (uid, bytes) VALUES (NEW.uid, ifnull(length(CAST(NEW.name AS BLOB)), 0) + ifnull(length(CAST(NEW.command AS BLOB)), 0) + ifnull(length(CAST(NEW.cwd AS BLOB)), 0) + ifnull(length(CAST(NEW.launch_key AS BLOB)), 0) + ifnull(length(CAST(NEW.workload_id AS BLOB)), 0) + ifnull(length(CAST(NEW.runtime_dir AS BLOB)), 0) + ifnull(length(CAST(NEW.gpus AS BLOB)), 0) + ifnull(length(CAST(NEW.contract AS BLOB)), 0) + ifnull(length(CAST(NEW.scheduler_job_id AS BLOB)), 0) + ifnull(length(CAST(NEW.steps AS BLOB)), 0) + ifnull(length(CAST(NEW.crash AS BLOB)), 0) + ifnull(length(CAST(NEW.phase AS BLOB)), 0) + ifnull(length(CAST(NEW.cost AS BLOB)), 0))
        ON CONFLICT (uid) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER jobs_bytes_update AFTER UPDATE ON jobs BEGIN
    UPDATE user_bytes SET bytes = bytes + (ifnull(length(CAST(NEW.name AS BLOB)), 0) + ifnull(length(CAST(NEW.command AS BLOB)), 0) + ifnull(length(CAST(NEW.cwd AS BLOB)), 0) + ifnull(length(CAST(NEW.launch_key AS BLOB)), 0) + ifnull(length(CAST(NEW.workload_id AS BLOB)), 0) + ifnull(length(CAST(NEW.runtime_dir AS BLOB)), 0) + ifnull(length(CAST(NEW.gpus AS BLOB)), 0) + ifnull(length(CAST(NEW.contract AS BLOB)), 0) + ifnull(length(CAST(NEW.scheduler_job_id AS BLOB)), 0) + ifnull(length(CAST(NEW.steps AS BLOB)), 0) + ifnull(length(CAST(NEW.crash AS BLOB)), 0) + ifnull(length(CAST(NEW.phase AS BLOB)), 0) + ifnull(length(CAST(NEW.cost AS BLOB)), 0)) - (ifnull(length(CAST(OLD.name AS BLOB)), 0) + ifnull(length(CAST(OLD.command AS BLOB)), 0) + ifnull(length(CAST(OLD.cwd AS BLOB)), 0) + ifnull(length(CAST(OLD.launch_key AS BLOB)), 0) + ifnull(length(CAST(OLD.workload_id AS BLOB)), 0) + ifnull(length(CAST(OLD.runtime_dir AS BLOB)), 0) + ifnull(length(CAST(OLD.gpus AS BLOB)), 0) + ifnull(length(CAST(OLD.contract AS BLOB)), 0) + ifnull(length(CAST(OLD.scheduler_job_id AS BLOB)), 0) + ifnull(length(CAST(OLD.steps AS BLOB)), 0) + ifnull(length(CAST(OLD.crash AS BLOB)), 0) + ifnull(length(CAST(OLD.phase AS BLOB)), 0) + ifnull(length(CAST(OLD.cost AS BLOB)), 0)) WHERE uid = NEW.uid;
END;
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs BEGIN
    UPDATE user_bytes SET bytes = bytes - (ifnull(length(CAST(OLD.name AS BLOB)), 0) + ifnull(length(CAST(OLD.command AS BLOB)), 0) + ifnull(length(CAST(OLD.cwd AS BLOB)), 0) + ifnull(length(CAST(OLD.launch_key AS BLOB)), 0) + ifnull(length(CAST(OLD.workload_id AS BLOB)), 0) + ifnull(length(CAST(OLD.runtime_dir AS BLOB)), 0) + ifnull(length(CAST(OLD.gpus AS BLOB)), 0) + ifnull(length(CAST(OLD.contract AS BLOB)), 0) + ifnull(length(CAST(OLD.scheduler_job_id AS BLOB)), 0) + ifnull(length(CAST(OLD.steps AS BLOB)), 0) + ifnull(length(CAST(OLD.crash AS BLOB)), 0) + ifnull(length(CAST(OLD.phase AS BLOB)), 0) + ifnull(length(CAST(OLD.cost AS BLOB)), 0)) WHERE uid = OLD.uid;
END;
CREATE INDEX jobs_ended_by_user ON jobs (uid, ended_ns) WHERE ended_ns IS NOT NULL;
