-- The policies the fleet brought, by where they were learned: every pulled event looks its origin
-- up (gitmd/fleet/sync.py FleetSync._from). Without an index each lookup read every policy: a node
-- joining a fleet of 12,000 policies spent 3.7 s of a 5.8-s round there (bench/fleet_scale.py --join).
CREATE INDEX policies_fleet_origin ON policies (json_extract(evidence, '$.origin'))
    WHERE json_extract(evidence, '$.source') = 'fleet';
