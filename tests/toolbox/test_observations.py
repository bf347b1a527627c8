"""Observations and outputs: bytes never reach the observation, outputs of sealed inputs stay sealed, the trajectory
is bounded.
"""

from __future__ import annotations

import secrets
from typing import Any

from refvault import Artifact, Ref, Scope, Toolbox, Vault

SCOPE = Scope("acme", "ana", "s1")


def canary() -> bytes:
    return b"CANARY-" + secrets.token_hex(24).encode() * 4


def test_output_derived_from_a_sealed_input_stays_sealed(vault: Vault) -> None:
    d = vault.put(SCOPE, canary(), disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def copy(doc: Ref) -> bytes:
        return doc.read()

    @box.tool
    def declassify(doc: Ref) -> Artifact:
        return Artifact(b"a public summary", disclosure="model")

    obs = box.call_sync("copy", {"doc": d.artifact_id}, scope=SCOPE)
    assert obs.artifacts[0]["disclosure"] == "sealed"
    assert box.call_sync("declassify", {"doc": d.artifact_id}, scope=SCOPE).artifacts[0]["disclosure"] == "model"


def test_bytes_nested_in_a_result_never_reach_the_observation(vault: Vault) -> None:
    secret = canary()
    d = vault.put(SCOPE, secret, disclosure="sealed")
    box = Toolbox(vault)

    @box.tool
    def leaky(doc: Ref) -> dict[str, Any]:
        return {"words": 1, "raw": doc.read()}

    obs = box.call_sync("leaky", {"doc": d.artifact_id}, scope=SCOPE)
    assert obs.is_error
    assert secret.decode()[:40] not in obs.content


def test_the_trajectory_is_bounded_and_keeps_active_runs(vault: Vault) -> None:
    box = Toolbox(vault, max_runs=2, max_events_per_run=4)

    @box.tool
    def ping() -> str:
        return "pong"

    box.call_sync("ping", {}, scope=SCOPE, run_id="long")
    box.call_sync("ping", {}, scope=SCOPE, run_id="a")
    for _ in range(3):
        box.call_sync("ping", {}, scope=SCOPE, run_id="long")  # stays active, so "a" is evicted next
    box.call_sync("ping", {}, scope=SCOPE, run_id="b")
    assert len(box.trajectory("long")) == 4
    assert box.trajectory("a") == []
    assert len(box.trajectory("b")) == 2
