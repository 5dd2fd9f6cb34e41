-- A workload belongs to the user whose jobs made it (hardening issue, item 2): its launch keys are
-- scoped by that user's uid ("uid:1000 python /srv/train.py"), and a job's windows are matched only
-- against its own user's workloads and the shared ones (owner_uid NULL: an admin's import). Before,
-- launch keys were free text shared by every user: any user could claim another's workload, take
-- part in its trials and so decide what policy that user's jobs got at launch.
ALTER TABLE workloads ADD COLUMN owner_uid INTEGER;
UPDATE workloads SET owner_uid = (
    SELECT j.uid FROM jobs j WHERE j.workload_id = workloads.id ORDER BY j.created_ns LIMIT 1
);
UPDATE jobs SET launch_key = 'uid:' || uid || ' ' || launch_key WHERE launch_key != '';
-- a key used by several users stays with the latest job's user; a key no job used is dropped
UPDATE launch_keys SET key = (
    SELECT j.launch_key FROM jobs j
    WHERE j.launch_key = 'uid:' || j.uid || ' ' || launch_keys.key
    ORDER BY j.created_ns DESC LIMIT 1
) WHERE EXISTS (
    SELECT 1 FROM jobs j WHERE j.launch_key = 'uid:' || j.uid || ' ' || launch_keys.key
);
DELETE FROM launch_keys WHERE key NOT LIKE 'uid:%';
CREATE INDEX workloads_owner ON workloads (owner_uid);
