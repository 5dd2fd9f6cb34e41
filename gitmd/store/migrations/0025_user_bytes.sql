-- Each user's bytes in the jobs table, kept by triggers (hardening issue: per-user stored bytes). A
-- registration beyond daemon.stored_bytes_per_user first deletes that user's oldest ended jobs, and
-- is refused when their open jobs alone hold that much (gitmd/jobs/registry.py): one user registering
-- 1-MiB commands in a loop filled the store for everyone until keep_days (90) passed.
CREATE TABLE user_bytes (
    uid INTEGER PRIMARY KEY,
    bytes INTEGER NOT NULL DEFAULT 0
);
INSERT INTO user_bytes (uid, bytes)
    SELECT uid, SUM(ifnull(length(name), 0) + ifnull(length(command), 0) + ifnull(length(cwd), 0) + ifnull(length(launch_key), 0) + ifnull(length(workload_id), 0) + ifnull(length(runtime_dir), 0) + ifnull(length(gpus), 0) + ifnull(length(contract), 0) + ifnull(length(scheduler_job_id), 0) + ifnull(length(steps), 0) + ifnull(length(crash), 0) + ifnull(length(phase), 0) + ifnull(length(cost), 0)) FROM jobs GROUP BY uid;
CREATE TRIGGER jobs_bytes_insert AFTER INSERT ON jobs BEGIN
    INSERT INTO user_bytes (uid, bytes) VALUES (NEW.uid, ifnull(length(NEW.name), 0) + ifnull(length(NEW.command), 0) + ifnull(length(NEW.cwd), 0) + ifnull(length(NEW.launch_key), 0) + ifnull(length(NEW.workload_id), 0) + ifnull(length(NEW.runtime_dir), 0) + ifnull(length(NEW.gpus), 0) + ifnull(length(NEW.contract), 0) + ifnull(length(NEW.scheduler_job_id), 0) + ifnull(length(NEW.steps), 0) + ifnull(length(NEW.crash), 0) + ifnull(length(NEW.phase), 0) + ifnull(length(NEW.cost), 0))
        ON CONFLICT (uid) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER jobs_bytes_update AFTER UPDATE ON jobs BEGIN
    UPDATE user_bytes SET bytes = bytes + (ifnull(length(NEW.name), 0) + ifnull(length(NEW.command), 0) + ifnull(length(NEW.cwd), 0) + ifnull(length(NEW.launch_key), 0) + ifnull(length(NEW.workload_id), 0) + ifnull(length(NEW.runtime_dir), 0) + ifnull(length(NEW.gpus), 0) + ifnull(length(NEW.contract), 0) + ifnull(length(NEW.scheduler_job_id), 0) + ifnull(length(NEW.steps), 0) + ifnull(length(NEW.crash), 0) + ifnull(length(NEW.phase), 0) + ifnull(length(NEW.cost), 0)) - (ifnull(length(OLD.name), 0) + ifnull(length(OLD.command), 0) + ifnull(length(OLD.cwd), 0) + ifnull(length(OLD.launch_key), 0) + ifnull(length(OLD.workload_id), 0) + ifnull(length(OLD.runtime_dir), 0) + ifnull(length(OLD.gpus), 0) + ifnull(length(OLD.contract), 0) + ifnull(length(OLD.scheduler_job_id), 0) + ifnull(length(OLD.steps), 0) + ifnull(length(OLD.crash), 0) + ifnull(length(OLD.phase), 0) + ifnull(length(OLD.cost), 0)) WHERE uid = NEW.uid;
END;
CREATE TRIGGER jobs_bytes_delete AFTER DELETE ON jobs BEGIN
    UPDATE user_bytes SET bytes = bytes - (ifnull(length(OLD.name), 0) + ifnull(length(OLD.command), 0) + ifnull(length(OLD.cwd), 0) + ifnull(length(OLD.launch_key), 0) + ifnull(length(OLD.workload_id), 0) + ifnull(length(OLD.runtime_dir), 0) + ifnull(length(OLD.gpus), 0) + ifnull(length(OLD.contract), 0) + ifnull(length(OLD.scheduler_job_id), 0) + ifnull(length(OLD.steps), 0) + ifnull(length(OLD.crash), 0) + ifnull(length(OLD.phase), 0) + ifnull(length(OLD.cost), 0)) WHERE uid = OLD.uid;
END;
CREATE INDEX jobs_ended_by_user ON jobs (uid, ended_ns) WHERE ended_ns IS NOT NULL;
