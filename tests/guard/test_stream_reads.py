"""A sealed artifact read through a Ref stream, backwards or forwards, is caught across chunk edges.

Tests named ``test_leak_*`` pin a gap that was found and closed; ``test_defended_*`` pin attacks the guard already
stopped when they were written.
"""

from __future__ import annotations

from refvault import Ref, Scope, Toolbox, Vault
from tests.guard.protected import _ids, _text, _tool

CHUNK = 1 << 20


# -- 5. stream chunks read out of order are protected without their neighbour's tail --------------------------------


def test_leak_stream_read_backwards_misses_the_chunk_edge(vault: Vault, scope: Scope) -> None:
    secret = _text(2 * CHUNK + 500, seed=5).encode()
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def tail_first(doc: Ref) -> str:
        with doc.open() as stream:
            stream.seek(CHUNK)
            after = stream.read(60)  # loads chunk 1 first
            stream.seek(CHUNK - 60)
            before = stream.read(60)  # then chunk 0
        return (before + after).decode()

    out = box.call_sync("tail_first", {"doc": art}, scope=scope).content
    assert out == secret[CHUNK - 60 : CHUNK + 60].decode()
    assert _ids(box.guard.scan(_tool(str(out)))) == {art}


def test_defended_stream_read_forwards(vault: Vault, scope: Scope) -> None:
    secret = _text(2 * CHUNK + 500, seed=6).encode()
    art = vault.put(scope, secret, media_type="text/plain", disclosure="sealed").artifact_id
    box = Toolbox(vault)

    @box.tool
    def edge(doc: Ref) -> str:
        with doc.open() as stream:
            stream.seek(CHUNK - 60)
            return stream.read(120).decode()

    out = box.call_sync("edge", {"doc": art}, scope=scope).content
    assert _ids(box.guard.scan(_tool(str(out)))) == {art}
