"""Every RPC fuzzed against the real daemon: valid-typed messages built from the proto descriptors
(any value each field's type allows) and raw random bytes. The daemon must answer each with a
deliberate status — never UNKNOWN (an unhandled exception) or INTERNAL — and keep serving."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as d
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitmd.api.client_auth import open_channel
from gitmd.api.pb import pb
from gitmd.auth.access import RPC_NEEDS
from tests.integration.conftest import Daemon

SERVICE = pb.DESCRIPTOR.services_by_name["Gitmd"]
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
FD = d.FieldDescriptor
UNPARSABLE = "Exception deserializing request!"

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FD.TYPE_DOUBLE: st.floats(),
    FD.TYPE_FLOAT: st.floats(width=32),
    FD.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: st.integers(-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: st.integers(-(2**31), 2**31 - 1),
    FD.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: st.integers(-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: st.integers(-(2**63), 2**63 - 1),
    FD.TYPE_UINT32: st.integers(0, 2**32 - 1),
    FD.TYPE_FIXED32: st.integers(0, 2**32 - 1),
    FD.TYPE_UINT64: st.integers(0, 2**64 - 1),
    FD.TYPE_FIXED64: st.integers(0, 2**64 - 1),
    FD.TYPE_BOOL: st.booleans(),
    FD.TYPE_STRING: st.text(max_size=40),
    FD.TYPE_BYTES: st.binary(max_size=300),
}


def _repeated(f: Any) -> bool:
    flag = getattr(f, "is_repeated", None)  # protobuf >= 6; older ones have only ``label``
    return bool(flag) if flag is not None else f.label == FD.LABEL_REPEATED


def _value(f: Any, depth: int) -> st.SearchStrategy[Any]:
    if f.type == FD.TYPE_MESSAGE:
        return messages(f.message_type, depth + 1)
    if f.type == FD.TYPE_ENUM:
        return st.sampled_from([v.number for v in f.enum_type.values])
    return _SCALARS[f.type]


def messages(desc: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    cls = message_factory.GetMessageClass(desc)
    if depth > 3:
        return st.just(cls())
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            optional[f.name] = st.dictionaries(_value(k, depth), _value(v, depth), max_size=3)
        elif _repeated(f):
            optional[f.name] = st.lists(_value(f, depth), max_size=3)
        else:
            optional[f.name] = _value(f, depth)

    def build(kw: dict[str, Any]) -> Any:
        msg = cls()
        for name, value in kw.items():
            f = desc.fields_by_name[name]
            target = getattr(msg, name) if _repeated(f) or f.type == FD.TYPE_MESSAGE else None
            if isinstance(value, dict):
                for k, v in value.items():
                    if f.message_type.fields_by_name["value"].type == FD.TYPE_MESSAGE:
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif isinstance(value, list):
                if f.type == FD.TYPE_MESSAGE:
                    for v in value:
                        target.add().CopyFrom(v)
                else:
                    target.extend(value)
            elif f.type == FD.TYPE_MESSAGE:
                target.CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries({}, optional=optional).map(build)  # type: ignore[arg-type]


def invoke(ch: grpc.Channel, method: Any, request: bytes) -> tuple[grpc.StatusCode, str]:
    path = f"/{SERVICE.full_name}/{method.name}"
    try:
        if method.server_streaming:
            call = ch.unary_stream(path)(request, timeout=0.4)
            try:
                for _ in zip(range(2), call, strict=False):
                    pass
            finally:
                call.cancel()
        else:
            ch.unary_unary(path)(request, timeout=10)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


METHODS = list(SERVICE.methods)


def test_the_access_table_lists_every_rpc() -> None:
    assert {m.name for m in METHODS} == set(RPC_NEEDS)


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_fuzz_each_rpc(daemon: Daemon, method: Any) -> None:
    seen: dict[grpc.StatusCode, int] = {}
    with open_channel(daemon.socket) as ch:

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(msg=messages(method.input_type), raw=st.binary(max_size=200))
        def fuzz(msg: Any, raw: bytes) -> None:
            for request in (msg.SerializeToString(), raw):
                code, details = invoke(ch, method, request)
                seen[code] = seen.get(code, 0) + 1
                if request is raw and details == UNPARSABLE:
                    continue  # bytes that are no message: grpcio's own INTERNAL, before any of our code
                assert code not in BAD, (method.name, request[:100], code, details)

        fuzz()
        health = health_pb2_grpc.HealthStub(ch)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert sum(seen.values()) >= 40
