-- `gitmctl pause`: gitmd takes no capture window and starts no trial (policies still apply at
-- launch), like `tuned-adm off`; kept across restarts until `gitmctl resume`.
CREATE TABLE pause (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    paused INTEGER NOT NULL,
    by TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    since_ns INTEGER NOT NULL DEFAULT 0
);
INSERT INTO pause (id, paused) VALUES (1, 0);
