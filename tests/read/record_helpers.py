"""Record helpers shared by the record-query tests: NDJSON bytes, a memory vault and a bounded cursor walk."""

from __future__ import annotations

import json
from typing import Any

from refvault import Vault

NDJSON = "application/x-ndjson"
CANARY = "CANARY-91c4-review-секрет"


def _ndjson(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _memory() -> Vault:
    return Vault.open("memory://")
