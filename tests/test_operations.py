"""One request type per operation: the capture arguments are named once and every door takes the same ones."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from refvault import Scope, Vault
from refvault.errors import InvalidArgument, InvalidType
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


# -- purpose and recipient: on every read, with one default, at every door ----------------------------------------


def _reader_defaults(function: object) -> tuple[object, object]:
    import inspect

    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    purpose, recipient = parameters["purpose"], parameters["recipient"]
    assert purpose.kind is inspect.Parameter.KEYWORD_ONLY, function
    assert recipient.kind is inspect.Parameter.KEYWORD_ONLY, function
    return purpose.default, recipient.default


def test_every_selective_request_carries_purpose_and_recipient_with_the_policy_defaults() -> None:
    from refvault.operations import GrepRequest, QueryRequest, RecordSetRequest, WindowRequest
    from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT

    for request in (WindowRequest(), GrepRequest("x"), QueryRequest(), RecordSetRequest()):
        assert (request.purpose, request.recipient) == (DEFAULT_PURPOSE, DEFAULT_RECIPIENT)
    with pytest.raises(InvalidArgument, match="a recipient is"):
        WindowRequest(recipient="nobody")
    with pytest.raises(InvalidArgument, match="a purpose is"):
        QueryRequest(purpose="")


def test_every_read_of_every_door_takes_purpose_and_recipient_with_the_same_defaults() -> None:
    from refvault import AsyncVault, Client, read
    from refvault.contract import VaultContract
    from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT

    reads = ("describe", "read_bytes", "read_range", "stream", "list", "verify_artifact")
    doors: list[object] = [getattr(kind, name) for kind in (Vault, Client, VaultContract) for name in reads]
    doors += [getattr(AsyncVault, name) for name in ("describe", "read_bytes", "read_range", "stream", "list")]
    doors += [Vault.open_artifact, Vault.derived, Vault.put_derived, Vault.open_derived]
    doors += [read.window, read.grep, read.query, read.derive, Client.window, Client.grep, Client.query, Client.derive]
    for door in doors:
        assert _reader_defaults(door) == (DEFAULT_PURPOSE, DEFAULT_RECIPIENT), door


def test_the_http_headers_carry_purpose_and_recipient_as_the_schema_states() -> None:
    import re

    from refvault.policy import check_purpose, check_recipient
    from refvault.server.inputs import PURPOSE_PATTERN, RECIPIENT_PATTERN

    for value in ("default", "support", "case:42/review", "A" * 128):
        assert check_purpose(value) == value
        assert re.fullmatch(PURPOSE_PATTERN, value)
    for value in ("user", "export", "model:gpt-4o", "tool:search_web"):
        assert check_recipient(value) == value
        assert re.fullmatch(RECIPIENT_PATTERN, value)
    for value in ("", "two words", "A" * 129):
        assert re.fullmatch(PURPOSE_PATTERN, value) is None
    for value in ("", "somebody", "model:", "model:a b"):
        assert re.fullmatch(RECIPIENT_PATTERN, value) is None
