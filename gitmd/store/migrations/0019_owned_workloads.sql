-- A workload belongs to the user whose jobs made it (hardening issue, item 2): its launch keys are
-- scoped by that user's uid ("uid:1000 python /srv/train.py"), and a job's windows are matched only
-- against its own user's workloads and the shared ones (owner_uid NULL: an admin's import). Before,
-- launch keys were free text shared by every user: any user could claim another's workload, take
-- part in its trials and so decide what policy that user's jobs got at launch.
ALTER TABLE workloads ADD COLUMN owner_uid INTEGER;
-- each workload goes to the user of its first job still stored; one whose jobs were all pruned goes
-- to no one (-1: no user matches it), never to everyone
UPDATE workloads SET owner_uid = COALESCE(
    (SELECT j.uid FROM jobs j WHERE j.workload_id = workloads.id ORDER BY j.created_ns LIMIT 1), -1
);
UPDATE jobs SET launch_key = 'uid:' || uid || ' ' || launch_key WHERE launch_key != '';
-- a launch key stays only for the user its workload belongs to: another user's use of the same text
-- is theirs to learn again (the key pointed them at a workload not theirs)
UPDATE launch_keys SET key = 'uid:' || (
    SELECT w.owner_uid FROM workloads w WHERE w.id = launch_keys.workload_id
) || ' ' || key
WHERE (SELECT w.owner_uid FROM workloads w WHERE w.id = launch_keys.workload_id) >= 0;
DELETE FROM launch_keys WHERE key NOT LIKE 'uid:%';
-- a crash quarantine keyed by a launch key follows the key of the user whose run crashed
UPDATE suspect_crashes SET key = 'launch:uid:' || (
    SELECT j.uid FROM jobs j WHERE j.id = suspect_crashes.job_id
) || ' ' || substr(key, 8)
WHERE key LIKE 'launch:%' AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = suspect_crashes.job_id);
CREATE INDEX workloads_owner ON workloads (owner_uid);
