"""Every selective read carries a proof of the stored bytes it was taken from, and who verified them."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from refvault import Scope, Vault, __version__, read, verify_excerpt
from refvault.proofs import merkle_root
from refvault.vault.proving import COMPONENT

MiB = 1 << 20
TEXT = b"".join(b"line %06d of the log\n" % i for i in range(120_000))  # > 2 MiB: windows straddle chunks


def root_of(vault: Vault, scope: Scope, artifact_id: str) -> str:
    return str(vault.describe(scope, artifact_id).retrieval["integrity"]["merkle_root"])


def stored_bytes(result: dict[str, Any]) -> bytes:
    """The stored bytes a window's text was decoded from, as a recipient recovers them from the result alone."""
    if result["invalid_utf8_bytes"]:
        return base64.b64decode(result["excerpt_base64"])
    return str(result["text"]).encode("utf-8")


def check_verified_by(result: dict[str, Any]) -> None:
    assert result["verified_by"]["component"] == COMPONENT
    assert result["verified_by"]["version"] == __version__
    assert result["verified_by"]["representation"]


@pytest.mark.parametrize(
    "options",
    [
        {"byte_range": [0, 100]},
        {"byte_range": [MiB - 40, 100]},  # across a 1 MiB chunk boundary
        {"byte_range": [len(TEXT) - 30, 100]},  # to the end
        {"lines": [0, 3]},
        {"lines": [49_930, 49_940]},  # across a chunk boundary
        {"lines": [119_998, None]},  # the last lines
        {"lines": [200_000, 200_010]},  # past the end: an empty proof
    ],
)
def test_a_window_proves_the_stored_bytes_of_its_text(vault: Vault, scope: Scope, options: dict[str, Any]) -> None:
    artifact_id = vault.put(scope, TEXT, media_type="text/plain").artifact_id
    result = read.window(vault, scope, artifact_id, **options)
    proof = result["proof"]
    excerpt = stored_bytes(result)
    assert excerpt == TEXT[proof["offset"] : proof["offset"] + proof["length"]]
    assert verify_excerpt(excerpt, offset=proof["offset"], proof=proof, root=root_of(vault, scope, artifact_id))
    assert not verify_excerpt(excerpt + b"!", offset=proof["offset"], proof=proof, root=proof["root"])
    check_verified_by(result)
    json.dumps(result)


def test_a_window_with_invalid_utf8_carries_the_stored_bytes(vault: Vault, scope: Scope) -> None:
    data = b"caf\xc3\xa9 \xff\xfe bytes\n" * 10
    artifact_id = vault.put(scope, data, media_type="text/plain").artifact_id
    result = read.window(vault, scope, artifact_id, byte_range=[0, 30])
    assert result["invalid_utf8_bytes"] > 0
    proof = result["proof"]
    excerpt = base64.b64decode(result["excerpt_base64"])
    assert excerpt == data[proof["offset"] : proof["offset"] + proof["length"]]
    assert verify_excerpt(excerpt, offset=proof["offset"], proof=proof, root=root_of(vault, scope, artifact_id))


def test_grep_and_query_prove_the_whole_object_they_were_taken_from(vault: Vault, scope: Scope) -> None:
    text_id = vault.put(scope, TEXT[:5000], media_type="text/plain").artifact_id
    found = read.grep(vault, scope, text_id, "line 000010")
    assert found["matches"]
    assert found["proof"]["offset"] == 0
    assert found["proof"]["length"] == 5000
    assert verify_excerpt(TEXT[:5000], offset=0, proof=found["proof"], root=root_of(vault, scope, text_id))
    assert "whole object" in found["verified_by"]["representation"]
    records = b"".join(b'{"n": %d}\n' % i for i in range(40))
    records_id = vault.put(scope, records, media_type="application/x-ndjson").artifact_id
    page = read.query(vault, scope, records_id, where={"field": "n", "op": "eq", "value": 33})
    assert verify_excerpt(records, offset=0, proof=page["proof"], root=root_of(vault, scope, records_id))
    assert page["proof"]["root"] == merkle_root(records).hex()
    assert "records parsed" in page["verified_by"]["representation"]
    check_verified_by(page)


VERIFY_RESULT = """
import json, sys
from refvault import verify_excerpt
message = json.load(sys.stdin)
result, root = message["result"], message["root"]
proof = result["proof"]
print(verify_excerpt(result["text"].encode("utf-8"), offset=proof["offset"], proof=proof, root=root))
"""


def test_a_separate_process_verifies_a_window_from_its_json_alone(embedded_vault: Vault, scope: Scope) -> None:
    artifact_id = embedded_vault.put(scope, TEXT, media_type="text/plain").artifact_id
    result = read.window(embedded_vault, scope, artifact_id, byte_range=[MiB - 500, 1000])
    root = root_of(embedded_vault, scope, artifact_id)
    forged = {**result, "text": result["text"].replace("line", "LINE", 1)}
    for sent, expected in ((result, "True"), (forged, "False")):
        message = json.dumps({"result": sent, "root": root})
        run = subprocess.run(
            [sys.executable, "-c", VERIFY_RESULT], input=message, capture_output=True, text=True, check=False
        )
        assert (run.returncode, run.stdout.strip()) == (0, expected), run.stderr[-2000:]
