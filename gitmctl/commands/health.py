"""`gitmctl health`: gRPC health checking (grpc.health.v1), the probe for systemd and Kubernetes.

Needs no token and no role: exit 0 when gitmd answers SERVING, 3 when it does not answer."""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gitmctl.client import EXIT_UNAVAILABLE, Client

NAME = "health"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(NAME, parents=[common], help="is gitmd serving? (gRPC health check; no role needed)")
    p.add_argument("--service", default="", help='the service to ask about (default "": the server)')


def run(args: argparse.Namespace, client: Client) -> int:
    stub = health_pb2_grpc.HealthStub(client.raw_channel)
    try:
        resp = stub.Check(health_pb2.HealthCheckRequest(service=args.service), timeout=client.timeout_s)
    except grpc.RpcError as e:
        print(f"gitmctl: not serving: {e.code().name} {e.details() or ''}".rstrip(), file=sys.stderr)
        return EXIT_UNAVAILABLE
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    if args.json:
        print(f'{{"status": "{status}"}}')
    else:
        print(status)
    return 0 if resp.status == health_pb2.HealthCheckResponse.SERVING else EXIT_UNAVAILABLE
