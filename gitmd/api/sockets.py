"""Where gitmd's side sockets lie, by the API socket's path: imported by launchers too, so it needs
nothing but the standard library."""

from __future__ import annotations

from pathlib import Path


def launch_socket_for(api_socket: Path) -> Path:
    """The launch socket (gitmd/api/launch_socket.py): beside the API socket, ``<stem>-launch.sock``."""
    return api_socket.with_name(api_socket.stem + "-launch.sock")
