"""Where gitmd's side sockets lie, by the API socket's path: imported by launchers too, so it needs
nothing but the standard library."""

from __future__ import annotations

import os
from pathlib import Path

MAX_UNIX_PATH = 107  # sun_path is 108 bytes with its NUL


def launch_socket_for(api_socket: Path) -> Path:
    """The launch socket (gitmd/api/launch_socket.py): beside the API socket, ``<stem>-launch.sock``."""
    return api_socket.with_name(api_socket.stem + "-launch.sock")


def fits_unix_socket(path: Path) -> bool:
    """Whether ``path`` can be a Unix socket's address: the launch socket is 7 bytes longer than the
    API socket and may not be, and then gitmd serves none (gitmd/api/server.py)."""
    return len(os.fsencode(path)) <= MAX_UNIX_PATH


# what one launch-socket request may be: a usual command line and a run's stdout metric (thousands of
# numbers) fit; a larger one goes by gRPC. The daemon reads it before the caller is judged, and
# parsed JSON takes ~20x its bytes (a 1-MiB line of empty lists took 22 MB): 8 of one uid's at once
# hold ~40 MB
MAX_REQUEST_BYTES = 256 << 10
