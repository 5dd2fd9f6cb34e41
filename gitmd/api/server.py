"""The gRPC server: our service, standard health checking, and reflection, on the Unix socket and,
when configured, on a TCP port that exists only with mutual TLS.

The Unix socket is created by grpc, then given its mode (default 0666: every local user may connect;
each call is authorised by the caller's kernel-verified uid) and group before the daemon reports
ready. Beside it the credential socket issues the tokens that carry that uid (``gitmd.auth``).
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

from gitmd.api.launch_socket import LaunchServer
from gitmd.api.pb import pb, pb_grpc
from gitmd.api.servicer import GitmdServicer
from gitmd.api.sockets import MAX_UNIX_PATH, fits_unix_socket, launch_socket_for
from gitmd.api.streams import CallSlots, StreamSlots
from gitmd.auth.gate import Gate
from gitmd.config import RemoteConfig
from gitmd.errors import StartupError
from gitmd.paths import secure_socket
from gitmd.service import Service

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Gitmd"].full_name
# What gitmd takes in one request, from anyone (it is read before the caller is judged): 80 MiB let
# a local user hold 1.5 GB of the root daemon with 40 refused 78-MiB calls at once (hostile-user
# run, 2026-12-04). The largest request is a library document (MAX_IMPORT_BYTES, 16 MiB); what
# gitmd sends (a library export to a reader) may be larger.
MAX_RECEIVE_BYTES = (16 << 20) + (64 << 10)
MAX_SEND_BYTES = 80 << 20


class ApiServer:
    def __init__(
        self,
        service: Service,
        gate: Gate,
        socket_path: Path,
        socket_mode: int,
        socket_group: str,
        remote: RemoteConfig | None = None,
        workers: int = 16,
    ):
        if not fits_unix_socket(socket_path):
            raise StartupError(
                f"socket path {socket_path} is {len(os.fsencode(socket_path))} bytes; Unix sockets allow "
                f"{MAX_UNIX_PATH}. Choose a shorter daemon.socket or runtime_dir."
            )
        self.socket_path = socket_path
        # the launchers' socket is 7 bytes longer than this one: where it cannot be a Unix socket
        # gitmd serves none and `gitmctl run` goes by gRPC, as to an older gitmd. Judged here, before
        # anything listens: it failed the start after the gRPC server had started
        self.launch_path: Path | None = launch_socket_for(socket_path)
        if not fits_unix_socket(self.launch_path):
            log.warning(
                "launch socket path %s is %d bytes; Unix sockets allow %d: serving no launch socket "
                "(`gitmctl run` uses gRPC, a little slower). Choose a shorter daemon.socket or runtime_dir.",
                self.launch_path,
                len(os.fsencode(self.launch_path)),
                MAX_UNIX_PATH,
            )
            self.launch_path = None
        self.remote = remote if remote is not None and remote.listen else None
        self.tcp_port = 0
        self._mode = socket_mode
        self._group = socket_group
        self.health = health.HealthServicer()
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                ("grpc.max_send_message_length", MAX_SEND_BYTES),
            ],
        )
        servicer = GitmdServicer(service, gate, StreamSlots(workers), CallSlots(workers))
        pb_grpc.add_GitmdServicer_to_server(servicer, self.server)
        self._servicer = servicer
        self._gate = gate
        self.launch: LaunchServer | None = None
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
        if self.remote is not None:
            self.tcp_port = self._listen_tls(self.remote)
        self.server.start()
        gid = self._secure_socket()
        if self.launch_path is not None:
            # the launchers' socket, with the API socket's mode and group (gitmd/api/launch_socket.py)
            self.launch = LaunchServer(self.launch_path, self._servicer, self._gate, self._mode, gid)
            self.launch.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving gRPC on unix:%s", self.socket_path)

    def _listen_tls(self, remote: RemoteConfig) -> int:
        """The TCP listener: mutual TLS, a client certificate signed by ``client_ca`` required."""
        assert remote.cert is not None and remote.key is not None and remote.client_ca is not None
        try:
            creds = grpc.ssl_server_credentials(
                [(remote.key.read_bytes(), remote.cert.read_bytes())],
                root_certificates=remote.client_ca.read_bytes(),
                require_client_auth=True,
            )
        except OSError as e:
            raise StartupError(f"remote: cannot read {e.filename}: {e.strerror}") from e
        try:
            port = self.server.add_secure_port(remote.listen, creds)
        except RuntimeError as e:
            raise StartupError(f"remote: cannot listen on {remote.listen}: {e}") from e
        if port == 0:
            raise StartupError(
                f"remote: cannot listen on {remote.listen} (port taken, or bad certificate/key)"
            )
        log.info("serving gRPC with mutual TLS on %s (port %d)", remote.listen, port)
        return int(port)

    def _secure_socket(self) -> int:
        """The API socket's mode and group; the group's id where it was given one, else -1."""
        secure_socket(self.socket_path, self._mode)
        try:
            gid = grp.getgrnam(self._group).gr_gid
        except KeyError:
            log.info(
                "group %r does not exist; socket %s keeps group %d",
                self._group,
                self.socket_path,
                os.lstat(self.socket_path).st_gid,
            )
            return -1
        try:
            secure_socket(self.socket_path, self._mode, gid)
        except PermissionError:
            log.warning("cannot give socket %s to group %r (not root?)", self.socket_path, self._group)
            return -1
        return gid

    def stop(self, grace_s: float) -> None:
        if self.launch is not None:
            self.launch.stop()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait(grace_s + 1)
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
