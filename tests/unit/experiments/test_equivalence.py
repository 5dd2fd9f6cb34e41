import pytest

from gitmd.errors import InvalidArgumentError
from gitmd.experiments.equivalence import Check, Contract, validate


def test_default_contract() -> None:
    assert [c.kind for c in Contract().effective] == ["exit_status", "payload"]
    c = validate([Check("stdout_metric", rtol=1e-4, regex=r"loss ([0-9.e+-]+)")])
    assert Contract.from_json(c.to_json()) == c and c.effective == c.checks


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (Check("vibes"), "kind must be one of"),
        (Check("payload", rtol=-1), "rtol"),
        (Check("payload", atol=float("nan")), "atol"),
        (Check("stdout_metric", regex="loss ("), "does not compile"),
        (Check("stdout_metric", regex=r"loss \d+"), "exactly one capture group"),
        (Check("output_file", path="out.npy", compare="numeric"), "absolute"),
        (Check("output_file", path="/w/out.npy", compare="eyeball"), "checksum or numeric"),
    ],
)
def test_contracts_that_cannot_be_evaluated_are_refused(check: Check, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        validate([check])
