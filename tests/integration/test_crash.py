"""gitmd SIGKILLed in the middle of store writes: the store stays intact, committed policies stay."""

from bench.crash_store import run


def test_sigkill_during_writes_keeps_the_store_intact() -> None:
    result = run(rounds=5, seed=7, verbose=False)
    assert result["rounds"] == 5 and result["committed_imports"] >= 4
