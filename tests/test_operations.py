"""One request type per operation: the capture arguments are named once and every door takes the same ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.errors import InvalidType
from refvault.operations import CaptureMetadata, CaptureOptions
from refvault.server.schema import METADATA_FIELDS

SCOPE = Scope("t", "u", "s")


def test_put_s_typed_arguments_are_the_checked_metadata_fields() -> None:
    assert list(CaptureOptions.__annotations__) == [f.name for f in dataclasses.fields(CaptureMetadata)]


def test_the_http_header_carries_every_capture_argument_but_the_idempotency_key() -> None:
    # The key travels in its own header (Idempotency-Key); everything else in Refvault-Metadata.
    assert set(METADATA_FIELDS) == set(CaptureOptions.__annotations__) - {"idempotency_key"}


def test_an_argument_put_does_not_take_is_a_type_error_and_stores_nothing(tmp_path: Path) -> None:
    with Vault.open(tmp_path / "store") as vault:
        with pytest.raises(InvalidType, match="unexpected keyword argument 'media'") as caught:
            vault.put(SCOPE, b"x", media="text/plain")  # type: ignore[call-arg]
        assert isinstance(caught.value, TypeError)
        assert vault.list(SCOPE) == []
