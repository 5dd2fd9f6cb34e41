-- The loop's phase of the job (gitmd/loop/state.py Phase: settling, observing, exploring, trial run,
-- known, observed), written when it changes, so that it outlives gitmd's memory of the job.
ALTER TABLE jobs ADD COLUMN phase TEXT NOT NULL DEFAULT '';
