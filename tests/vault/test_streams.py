"""Open streams: deadlines reached mid-stream and bad seeks."""

from __future__ import annotations

from datetime import timedelta

import pytest

from refvault import Scope, Vault
from refvault.catalog.base import CHUNK_SIZE
from refvault.errors import (
    Expired,
)
from tests.conftest import Clock, payload

SCOPE = Scope("acme", "ana", "s1")


# -- streams ---------------------------------------------------------------------------


def test_an_open_stream_stops_at_the_deadline(vault: Vault, clock: Clock) -> None:
    data = payload(3 * CHUNK_SIZE)
    d = vault.put(SCOPE, data, expires_at=clock.now + timedelta(minutes=1))
    with vault.stream(SCOPE, d.artifact_id) as stream:
        assert stream.read(10) == data[:10]
        clock.advance(minutes=2)
        assert stream.read(10) == data[10:20]  # same chunk: already verified and authorised
        with pytest.raises(Expired):
            stream.read(CHUNK_SIZE)


def test_seek_with_a_bad_whence_is_a_value_error(vault: Vault) -> None:
    d = vault.put(SCOPE, b"abc")
    with vault.stream(SCOPE, d.artifact_id) as stream, pytest.raises(ValueError, match="whence"):
        stream.seek(0, 7)
