-- The Python frameworks (distribution -> version) the job's process had mapped when gitmd first saw
-- it in a window (gitmd/jobs/frameworks.py), as JSON; '' when not seen. A policy's evidence says
-- what it was learned with, and the fleet carries it to the nodes that get the policy.
ALTER TABLE jobs ADD COLUMN frameworks TEXT NOT NULL DEFAULT '';
