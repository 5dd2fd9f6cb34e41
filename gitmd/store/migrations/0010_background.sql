-- A background job yields its GPU to foreground jobs: gitmd may hold its kernel launches for part
-- of each period (the cotenant_yield lever) while a foreground job on the same GPU is held back by it.
ALTER TABLE jobs ADD COLUMN background INTEGER NOT NULL DEFAULT 0;
