-- A launch key someone stated for a workload (an admin's library import, a policy from the fleet),
-- as against one gitmd linked from a run it fingerprinted. A key read from a command resolves a
-- launch to its workload only when it was given, or with the exact command line (gitmd/loop/launch.py:
-- one script runs other programs by its arguments).
--
-- Keys already here are taken as linked, not given: before this, an observed run linked them the
-- same way as an import did, and nothing tells them apart. A recurring command gets its workload
-- at launch again once one run of it has been fingerprinted (its command key); an admin may import
-- the library again to state its keys.
ALTER TABLE launch_keys ADD COLUMN given INTEGER NOT NULL DEFAULT 0;
