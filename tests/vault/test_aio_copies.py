"""``AsyncVault``'s derived-copy methods: each runs the vault's own in a worker thread and gives the same values."""

from __future__ import annotations

import asyncio
import json

import pytest

from refvault import AsyncVault, Scope, Vault, errors

SCOPE = Scope("acme", "ana", "s1")
JSONL = "application/x-ndjson"


def _rows(seed: str) -> bytes:
    return b"".join(json.dumps({"n": n, "email": f"{seed}{n}@example.com"}).encode() + b"\n" for n in range(3))


def test_every_copy_method_answers_as_the_vault_does() -> None:
    async def run() -> None:
        async with AsyncVault(Vault.open("memory://")) as vault:
            source = (await vault.put(SCOPE, _rows("a"), media_type=JSONL)).artifact_id
            output = (await vault.put(SCOPE, _rows("b"), media_type=JSONL, derived_from=[source])).artifact_id
            redaction = await vault.redact(SCOPE, output, fields=["email"])
            assert (await vault.redact(SCOPE, output, fields=["email"])).artifact_id == redaction.artifact_id
            sync = vault.embedded_vault()
            assert await vault.receipt(SCOPE, redaction.artifact_id) == sync.receipt(SCOPE, redaction.artifact_id)
            graph = await vault.lineage(SCOPE, source, direction="down", depth=2)
            assert graph == sync.lineage(SCOPE, source, direction="down", depth=2)
            assert await vault.lineage_status(SCOPE, redaction.artifact_id) == "current"
            newer = (await vault.put(SCOPE, _rows("c"), media_type=JSONL)).artifact_id
            await vault.supersede(SCOPE, source, newer, reason="corrected")
            assert await vault.lineage_status(SCOPE, redaction.artifact_id) == "stale"
            with pytest.raises(errors.InvalidArgument, match="not a redaction"):
                await vault.refresh(SCOPE, output)
            made = await vault.hold(SCOPE, newer, reason="keep")
            assert await vault.holds(SCOPE, newer) == [made]
            with pytest.raises(errors.Held):
                await vault.delete(SCOPE, newer)
            await vault.release(SCOPE, newer, made.hold_id)
            await vault.revoke_artifact(SCOPE, newer, reason="wrong")
            states = await vault.replay_status(SCOPE, [newer, source], recipient="model:x")
            assert states == sync.replay_status(SCOPE, [newer, source], recipient="model:x")
            assert states[newer]["state"] == "revoked"
            report = await vault.delete(SCOPE, source, cascade=True)
            assert {d["id"] for d in report.deleted} >= {source, output, redaction.artifact_id}

    asyncio.run(run())
