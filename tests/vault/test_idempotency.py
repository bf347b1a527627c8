"""Idempotent captures: a retry must be the same capture, and an expired first capture is not replayed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from refvault import Scope, Vault
from refvault.errors import (
    Expired,
    IdempotencyConflict,
)
from tests.conftest import Clock

SCOPE = Scope("acme", "ana", "s1")


# -- idempotency: a retry must be the same capture -----------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("disclosure", "sealed"),
        ("media_type", "text/plain"),
        ("filename", "other.txt"),
        ("source_version", {"snapshot_id": "b"}),
        ("completeness", {"status": "partial", "omissions": ["x"]}),
        ("tool_call_id", "call_2"),
    ],
)
def test_a_retry_with_different_metadata_is_a_conflict(vault: Vault, field: str, value: object) -> None:
    base: dict[str, object] = {
        "media_type": "application/octet-stream",
        "disclosure": "model",
        "filename": "a.bin",
        "source_version": {"snapshot_id": "a"},
        "tool_call_id": "call_1",
    }
    first = vault.put(SCOPE, b"bytes", idempotency_key="k", **base)  # type: ignore[arg-type]
    with pytest.raises(IdempotencyConflict, match=field) as err:
        vault.put(SCOPE, b"bytes", idempotency_key="k", **{**base, field: value})  # type: ignore[arg-type]
    assert "snapshot_id" not in str(err.value) or field != "source_version"
    assert vault.list(SCOPE) == [first]


def test_a_retry_after_the_first_capture_expired_captures_afresh(vault: Vault, clock: Clock) -> None:
    first = vault.put(SCOPE, b"bytes", idempotency_key="k", expires_at=clock.now + timedelta(seconds=5))
    again = vault.put(SCOPE, b"bytes", idempotency_key="k", expires_at=clock.now + timedelta(hours=1))
    assert again.artifact_id == first.artifact_id  # deadline differences alone still replay
    clock.advance(seconds=10)
    fresh = vault.put(SCOPE, b"bytes", idempotency_key="k", expires_at=clock.now + timedelta(hours=1))
    assert fresh.artifact_id != first.artifact_id
    assert vault.read_bytes(SCOPE, fresh.artifact_id) == b"bytes"
    with pytest.raises(Expired):
        vault.read_bytes(SCOPE, first.artifact_id)
