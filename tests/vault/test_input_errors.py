"""Bad input is always a typed error, and the audit never records a string that is not an id."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone

import pytest

from refvault import AuditRecord, Descriptor, Scope, Vault
from refvault.errors import (
    InvalidArgument,
    InvalidMetadata,
)

SCOPE = Scope("acme", "ana", "s1")


# -- bad input is always a typed error ---------------------------------------------------


def nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "call",
    [
        lambda v: v.put(SCOPE, b"x", source_version=nested(5000)),
        lambda v: v.put(SCOPE, b"x", expires_at=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))),
        lambda v: v.put(SCOPE, memoryview(bytes(range(10)))[::2]),
        lambda v: v.put(SCOPE, _NonBlocking()),
        lambda v: v.read_range(SCOPE, v.put(SCOPE, b"abc").artifact_id, 0.5, 1),
        lambda v: v.read_range(SCOPE, v.put(SCOPE, b"abc").artifact_id, True, 1),
        lambda v: v.gc(grace="1"),
        lambda v: Descriptor.from_dict(dict.fromkeys(Descriptor.__dataclass_fields__, "secret-ish text")),
        lambda v: Vault.open("bad\x00path"),
    ],
)
def test_bad_input_raises_invalid_argument(vault: Vault, call: object) -> None:
    with pytest.raises(InvalidArgument) as err:
        call(vault)  # type: ignore[operator]
    assert "secret-ish" not in str(err.value)


class _NonBlocking(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes | None:  # type: ignore[override]
        return None


def test_bad_metadata_is_invalid_metadata(vault: Vault) -> None:
    with pytest.raises(InvalidMetadata):
        vault.put(SCOPE, b"x", source_version=nested(5000))


# -- audit and lifecycle -------------------------------------------------------------


def test_audit_never_records_a_string_that_is_not_an_id(vault: Vault) -> None:
    records: list[AuditRecord] = []
    vault.add_audit_sink(records.append)
    with pytest.raises(InvalidArgument):
        vault.describe(SCOPE, "password=hunter2")
    with pytest.raises(InvalidArgument):
        vault.read_range(SCOPE, "password=hunter2", 0.5, 1)  # type: ignore[arg-type]
    assert [(r.action, r.outcome, r.artifact_id) for r in records] == [
        ("describe", "InvalidId", None),
        ("read", "InvalidArgument", None),
    ]
    assert "hunter2" not in repr(records)


@pytest.mark.parametrize("grace", [float("inf"), float("nan"), 1e300, -1])
def test_grace_must_be_finite_and_sane(vault: Vault, grace: float) -> None:
    with pytest.raises(InvalidArgument, match="grace"):
        vault.gc(grace=grace)
