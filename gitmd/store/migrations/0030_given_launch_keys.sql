-- A launch key someone stated for a workload (an admin's library import, a policy from the fleet),
-- as against one gitmd linked from a run it fingerprinted. A key read from a command resolves a
-- launch to its workload only when it was given, or with the exact command line (gitmd/loop/launch.py:
-- one script runs other programs by its arguments).
ALTER TABLE launch_keys ADD COLUMN given INTEGER NOT NULL DEFAULT 0;
