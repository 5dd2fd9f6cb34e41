"""`gitmctl gpus`: the GPUs gitmd sees."""

from __future__ import annotations

import argparse

from gitmctl import render
from gitmctl.client import Client, pb

NAME = "gpus"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    sub.add_parser(NAME, parents=[common], help="list the GPUs gitmd sees")


def run(args: argparse.Namespace, client: Client) -> int:
    resp = client.call(client.stub.ListGpus, pb.ListGpusRequest())
    if args.json:
        render.print_json(resp)
        return 0
    rows = [
        (
            str(g.index),
            g.name,
            g.uuid,
            g.pci_bus_id or "-",
            render.bytes_h(g.memory_total_bytes),
            render.opt(g, "sm_clock_max_mhz"),
            render.opt(g, "mem_clock_max_mhz"),
            render.opt(g, "power_limit_mw", scale=1e-3),
        )
        for g in resp.gpus
    ]
    print(f"backend {resp.backend}, driver {resp.driver_version or '-'}")
    render.table(("GPU", "NAME", "UUID", "PCI", "MEMORY", "SM MAX MHz", "MEM MAX MHz", "POWER LIMIT W"), rows)
    return 0
