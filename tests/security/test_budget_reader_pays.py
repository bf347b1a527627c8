"""A redaction derivative a tenant's ``redact`` policy makes on demand is charged to the run of the reader whose
read made it: a grantee's read is never refused by the owner's budget, never told the owner's limits, and never
spends the owner's run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refvault import Budget, BudgetExceeded, Principal, Scope, Vault
from refvault.policy import Policy, Rule

OWNER = Scope("acme", "alice", "s1")
READER = Scope("acme", "bob", "b1")
TEXT = b"ticket 7: write to ada.canary@example.com about the invoice\n"
REDACT_FOR_MODELS = Policy(
    rules=(Rule(id="pii-to-models", labels=frozenset({"pii"}), recipients=("model:*",), action="redact"),),
    version="r1",
)
OWNER_LIMIT = 123_457  # a figure only the owner's budget holds


@pytest.fixture(params=["memory", "embedded"])
def vault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Vault]:
    with Vault.open("memory://" if request.param == "memory" else tmp_path / "store") as opened:
        yield opened


def _shared(vault: Vault) -> str:
    source = vault.put(OWNER, TEXT, media_type="text/plain", labels={"pii"}).artifact_id
    vault.set_policy(OWNER.tenant, REDACT_FOR_MODELS)
    vault.share(OWNER, source, to=Principal(OWNER.tenant, READER.user))
    return source


def test_the_owners_exhausted_budget_does_not_refuse_a_grantees_redacted_read(vault: Vault) -> None:
    source = _shared(vault)
    vault.set_budget(OWNER, Budget(recomputations=0, acquired_bytes=0, retained_bytes=0, scanned_bytes=OWNER_LIMIT))
    shown = vault.read_bytes(READER, source, recipient="model:claude")
    assert b"ada.canary" not in shown
    assert b"[EMAIL_1]" in shown
    spent = vault.usage(OWNER).spent
    assert spent["recomputations"] == spent["acquired_bytes"] == spent["retained_bytes"] == 0


def test_the_derivative_is_charged_to_the_readers_run(vault: Vault) -> None:
    source = _shared(vault)
    vault.set_budget(OWNER, Budget(acquired_bytes=10**6))
    vault.set_budget(READER, Budget(recomputations=5, acquired_bytes=10**6))
    shown = vault.read_bytes(READER, source, recipient="model:claude")
    reader = vault.usage(READER).spent
    assert reader["recomputations"] == 1
    assert reader["acquired_bytes"] == reader["retained_bytes"] == len(shown)
    assert vault.usage(OWNER).spent["acquired_bytes"] == 0  # its put came before its budget; nothing since
    vault.read_bytes(READER, source, recipient="model:claude")  # made once: reused, not recomputed
    assert vault.usage(READER).spent["recomputations"] == 1


def test_a_refusal_names_the_readers_own_budget_never_the_owners(vault: Vault) -> None:
    source = _shared(vault)
    vault.set_budget(OWNER, Budget(recomputations=OWNER_LIMIT))
    vault.set_budget(READER, Budget(recomputations=0))
    with pytest.raises(BudgetExceeded) as raised:
        vault.read_bytes(READER, source, recipient="model:claude")
    assert raised.value.dimension == "recomputations"
    assert str(OWNER_LIMIT) not in str(raised.value)
    assert f"{OWNER_LIMIT:g}" not in str(raised.value)
    assert vault.usage(OWNER).spent["recomputations"] == 0
    assert [d.artifact_id for d in vault.list(OWNER)] == [source]  # nothing was made
