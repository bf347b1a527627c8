"""The evidence gate refuses stale and revoked evidence (own or inherited) unless the decision allows it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from refvault import Scope, Vault
from refvault.evidence import REASONS, Requirement, reread

SOURCE = "infra.incident-events"
OBSERVED = datetime.now(UTC) - timedelta(minutes=1)
NEED = Requirement(source=SOURCE, max_age=timedelta(hours=1))


def _put(vault: Vault, scope: Scope, data: bytes, **extra: object) -> str:
    return vault.put(
        scope,
        data,
        media_type="text/plain",
        source_version={"source_id": SOURCE, "observed_at": OBSERVED.isoformat()},
        completeness={"status": "complete"},
        **extra,  # type: ignore[arg-type]
    ).artifact_id


def test_the_two_lineage_reasons_are_listed() -> None:
    assert "stale_evidence" in REASONS
    assert "revoked_evidence" in REASONS


def test_a_copy_of_a_superseded_source_is_stale_evidence(vault: Vault, scope: Scope) -> None:
    root = _put(vault, scope, b"v1")
    copy = _put(vault, scope, b"summary of v1", derived_from=[root])
    at = datetime.now(UTC)
    assert reread(vault, scope, copy, NEED, at=at).satisfied
    newer = _put(vault, scope, b"v2", supersedes=root)
    verdict = reread(vault, scope, copy, NEED, at=at)
    assert verdict.codes == ("stale_evidence",)
    own = reread(vault, scope, root, NEED, at=at)
    assert own.codes == ("stale_evidence",)
    assert newer in own.reasons[0].message
    allowed = Requirement(source=SOURCE, max_age=timedelta(hours=1), allow_stale=True)
    assert reread(vault, scope, copy, allowed, at=at).satisfied


def test_a_copy_of_a_revoked_source_is_revoked_evidence(vault: Vault, scope: Scope) -> None:
    root = _put(vault, scope, b"v1")
    middle = _put(vault, scope, b"from v1", derived_from=[root])
    leaf = _put(vault, scope, b"from the copy", derived_from=[middle])
    vault.revoke_artifact(scope, root, reason="the feed was wrong")
    at = datetime.now(UTC)
    assert reread(vault, scope, leaf, NEED, at=at).codes == ("revoked_evidence",)
    allowed = Requirement(source=SOURCE, max_age=timedelta(hours=1), allow_revoked=True)
    assert reread(vault, scope, leaf, allowed, at=at).satisfied


def test_a_copy_whose_source_was_deleted_is_revoked_evidence(vault: Vault, scope: Scope) -> None:
    root = _put(vault, scope, b"v1")
    copy = _put(vault, scope, b"from v1", derived_from=[root])
    vault.delete(scope, root)
    verdict = reread(vault, scope, copy, NEED, at=datetime.now(UTC))
    assert verdict.codes == ("revoked_evidence",)
    assert "v1" not in verdict.reasons[0].message
