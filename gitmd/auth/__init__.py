"""Who is calling, from the kernel, and what they may do.

grpcio does not hand a servicer the peer's credentials on a Unix socket, so identity comes through a
second socket: a client connects to the *credential socket*, the daemon reads the peer's uid, gid and
groups from the kernel (SO_PEERCRED, SO_PEERGROUPS) and answers with single-use tokens bound to that
uid, MACed under a secret that never leaves the daemon's memory (``tokens``). The client sends one
token as metadata with each RPC (``gitmd.api.client_auth``). Remote schedulers come over TCP with
mutual TLS only; their certificate's subject maps to a role (``remote``). ``access`` decides, per
RPC, what a caller may do.
"""

# The gRPC metadata key a token travels under. Here, not in ``tokens``, so that a client (gitmctl's
# every start, `gitmctl run`'s before the job's exec) names it without importing the MAC machinery.
METADATA_KEY = "gitm-token"
