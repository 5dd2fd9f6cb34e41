"""The systemd readiness protocol (sd_notify): READY=1, STOPPING=1, STATUS=... on $NOTIFY_SOCKET.

A no-op without systemd. Abstract socket names (leading '@') are supported, as systemd uses them.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(message: str) -> bool:
    """Send one notification; True when a manager is listening and took it."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
        return True
    except OSError as e:
        log.warning("sd_notify to %s failed: %s", address, e)
        return False
