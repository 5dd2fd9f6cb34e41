-- The fleet library ([fleet], gitmd/fleet/): what this node promotes or reverts waits here until the
-- fleet store has it (a slow or absent fleet store loses nothing), and where this node is in the
-- fleet's event log, with what sync did (pushed, pulled, refused, errors).
CREATE TABLE fleet_outbox (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('policy', 'revert')),
    policy_id INTEGER NOT NULL,
    created_ns INTEGER NOT NULL
);
CREATE TABLE fleet_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    cursor INTEGER NOT NULL DEFAULT 0,
    pushed INTEGER NOT NULL DEFAULT 0,
    pulled INTEGER NOT NULL DEFAULT 0,
    refused INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    last_ok_ns INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT ''
);
INSERT INTO fleet_state (id) VALUES (1);
