-- The fleet's trust (fleet issue, item 3): besides promotions and reverts, the outbox carries this
-- node's confirmation of a policy another node learned ('confirm': held here, or not, or suspect)
-- and an admin's pin or unpin, which reach every node. SQLite cannot widen a CHECK: the table is
-- made anew with what it held.
CREATE TABLE fleet_outbox_new (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('policy', 'revert', 'confirm', 'pin', 'unpin')),
    policy_id INTEGER NOT NULL,
    created_ns INTEGER NOT NULL
);
INSERT INTO fleet_outbox_new (id, kind, policy_id, created_ns)
    SELECT id, kind, policy_id, created_ns FROM fleet_outbox;
DROP TABLE fleet_outbox;
ALTER TABLE fleet_outbox_new RENAME TO fleet_outbox;
