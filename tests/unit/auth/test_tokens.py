from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitmd.auth.tokens import Peer, TokenAuthority
from gitmd.errors import UnauthenticatedError

PEER = Peer(uid=1001, gid=100, groups=frozenset({100, 27}), pid=4242)


class Clock:
    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now


def test_a_token_names_its_peer_once() -> None:
    a = TokenAuthority()
    t = a.issue(PEER)
    assert a.redeem(t) == PEER
    with pytest.raises(UnauthenticatedError, match="replayed"):
        a.redeem(t)


def test_expired_tokens_are_refused_and_forgotten() -> None:
    clock = Clock()
    a = TokenAuthority(ttl_s=60, clock=clock)
    used, fresh = a.issue(PEER), a.issue(PEER)
    a.redeem(used)
    clock.now += 61 * 10**9
    with pytest.raises(UnauthenticatedError, match="expired"):
        a.redeem(fresh)
    a.redeem(a.issue(PEER))
    assert a.outstanding() == 1  # the expired nonce was pruned


def test_tokens_of_another_secret_or_altered_are_forged() -> None:
    a, b = TokenAuthority(), TokenAuthority()
    with pytest.raises(UnauthenticatedError, match="forged"):
        b.redeem(a.issue(PEER))
    t = a.issue(PEER)
    body, mac = t[3:].split(".")
    root = TokenAuthority(secret=b"x" * 32).issue(Peer(0, 0, frozenset({0}), 1))
    root_body = root[3:].split(".")[0]
    for bad in (f"v1.{root_body}.{mac}", f"v1.{body}.{mac[::-1]}", f"v1.{body}", "v2." + t[3:], ""):
        with pytest.raises(UnauthenticatedError):
            a.redeem(bad)
    assert a.redeem(t) == PEER  # the real one was never spent by the attempts


@given(st.text(max_size=300))
def test_any_text_is_refused_cleanly(text: str) -> None:
    with pytest.raises(UnauthenticatedError):
        TokenAuthority(secret=b"k" * 32).redeem(text)
