"""The gRPC server on the Unix socket: our service, standard health checking, and reflection.

The socket is created by grpc, then given its mode (0660) and group (gitm, when the group exists)
before the daemon reports ready, so no client ever sees it with looser permissions.
"""

from __future__ import annotations

import grp
import logging
import os
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gitmd.api.pb import pb, pb_grpc
from gitmd.api.servicer import GitmdServicer
from gitmd.errors import StartupError
from gitmd.service import Service

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Gitmd"].full_name
MAX_UNIX_PATH = 107  # sun_path is 108 bytes with its NUL
MAX_MESSAGE_BYTES = 80 << 20  # a library document may be 64 MiB


class ApiServer:
    def __init__(
        self, service: Service, socket_path: Path, socket_mode: int, socket_group: str, workers: int = 16
    ):
        if len(os.fsencode(socket_path)) > MAX_UNIX_PATH:
            raise StartupError(
                f"socket path {socket_path} is {len(os.fsencode(socket_path))} bytes; Unix sockets allow "
                f"{MAX_UNIX_PATH}. Choose a shorter daemon.socket or runtime_dir."
            )
        self.socket_path = socket_path
        self._mode = socket_mode
        self._group = socket_group
        self.health = health.HealthServicer()
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        pb_grpc.add_GitmdServicer_to_server(GitmdServicer(service), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            self.server,
        )

    def start(self) -> None:
        address = f"unix:{self.socket_path}"
        try:
            port = self.server.add_insecure_port(address)
        except RuntimeError as e:
            raise StartupError(f"cannot listen on {self.socket_path}: {e}") from e
        if port == 0:
            raise StartupError(f"cannot listen on {self.socket_path}")
        self.server.start()
        self._secure_socket()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving gRPC on unix:%s", self.socket_path)

    def _secure_socket(self) -> None:
        os.chmod(self.socket_path, self._mode)
        try:
            gid = grp.getgrnam(self._group).gr_gid
        except KeyError:
            log.info(
                "group %r does not exist; socket %s keeps group %d",
                self._group,
                self.socket_path,
                os.stat(self.socket_path).st_gid,
            )
            return
        try:
            os.chown(self.socket_path, -1, gid)
        except PermissionError:
            log.warning("cannot give socket %s to group %r (not root?)", self.socket_path, self._group)

    def stop(self, grace_s: float) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait(grace_s + 1)
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
