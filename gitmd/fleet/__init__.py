"""The fleet library on PostgreSQL ([fleet] in gitmd.toml, off by default): what one node learns,
every node knows.

A node pushes the policies it promotes and the reverts it makes (queued in its own store first,
``fleet_outbox``, so a fleet store that is away loses nothing) as events of one append-only log,
``fleet_events``, and pulls the other nodes' events on a schedule. A pulled policy is checked as an
import is (the catalog's variables only, bounded sizes, the same GPU model as this node) and kept as
a validated policy of the local workload it belongs to, marked as from the fleet; a pulled revert
reverts it here. The node's SQLite store stays its own and works alone: registration never waits
for the fleet store.
"""

from gitmd.fleet.sync import FleetSync

__all__ = ["FleetSync"]
