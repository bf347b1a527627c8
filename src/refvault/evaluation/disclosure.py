"""Unauthorised disclosure: reads across scopes, sealed content through model tools, forged cursors, foreign Refs.

Every secret here is canary-laden; an attempt is *blocked* when the build
refuses it the expected way (another scope's artifact is the same ``NotFound``
as an id that never existed, to the character) and no canary reached a sink.
The LLM-edge attempts live in :mod:`refvault.evaluation.edge`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from refvault import read
from refvault.errors import InvalidCursor, RefvaultError, SealedArtifact
from refvault.evaluation.tools import call_tool, make_toolbox
from refvault.evaluation.world import Attempt, World, jsonl
from refvault.ids import new_artifact_id
from refvault.model import Disclosure, Scope
from refvault.toolbox.builtin import instructions
from refvault.toolbox.toolbox import Observation, Toolbox

__all__ = ["Secrets", "plant", "run"]

PROP = "disclosure"


@dataclass(frozen=True, slots=True)
class Secrets:
    """The owner's canary-laden artifacts of one trial."""

    records: str  # model-disclosure JSON Lines (customers.jsonl): readable by its owner's model, nobody else
    runbook: str  # sealed text (runbook.md)
    ledger: str  # sealed JSON Lines (ledger.jsonl)
    screenshot: str  # sealed PNG (screenshot.png)
    credentials: str  # sealed text (credentials.txt), never read as a Ref


def plant(world: World) -> Secrets:
    """Capture this trial's secrets in the owner's scope."""
    vault, owner = world.vault, world.owner

    def put(data: bytes, media_type: str, filename: str, disclosure: Disclosure) -> str:
        return vault.put(owner, data, media_type=media_type, filename=filename, disclosure=disclosure).artifact_id

    return Secrets(
        records=put(world.secret_records(200), "application/x-ndjson", "customers.jsonl", "model"),
        runbook=put(world.secret_lines(60), "text/markdown", "runbook.md", "sealed"),
        ledger=put(world.secret_records(100), "application/x-ndjson", "ledger.jsonl", "sealed"),
        screenshot=put(world.secret_binary(4096), "image/png", "screenshot.png", "sealed"),
        credentials=put(world.secret_lines(30), "text/plain", "credentials.txt", "sealed"),
    )


def _shape(text: str, artifact_id: str) -> str:
    """A message with the id it names blanked out, to compare with the message about another id."""
    return text.replace(artifact_id, "<id>")


def _failure(call: Callable[[], object]) -> tuple[str, str] | None:
    """``(error type, message)`` of what ``call`` raised, or None if it returned."""
    try:
        call()
    except RefvaultError as exc:
        return type(exc).__name__, str(exc)
    return None


async def run(world: World, secrets: Secrets) -> None:
    box = make_toolbox(world, "excerpt")
    await _cross_scope(world, box, secrets)
    await _sealed(world, box, secrets)
    await _cursors(world, box, secrets)
    await _foreign_refs(world, box, secrets)


# -- reads from another tenant, user or session ------------------------------------------------------------------------


async def _cross_scope(world: World, box: Toolbox, secrets: Secrets) -> None:
    vault = world.vault
    target = secrets.records

    def direct(scope: Scope) -> list[tuple[str, Callable[[str], object]]]:
        def stream(artifact_id: str) -> bytes:
            with vault.stream(scope, artifact_id) as handle:
                return handle.read()

        return [
            ("describe", lambda i: vault.describe(scope, i)),
            ("read_bytes", lambda i: vault.read_bytes(scope, i)),
            ("read_range", lambda i: vault.read_range(scope, i, 0, 256)),
            ("stream", stream),
            ("verify_artifact", lambda i: vault.verify_artifact(scope, i)),
            ("window", lambda i: read.window(vault, scope, i, lines=[0, 20])),
            ("grep", lambda i: read.grep(vault, scope, i, "secret")),
            ("query", lambda i: read.query(vault, scope, i, limit=20)),
        ]

    tools: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
        ("describe_artifact", lambda i: {"artifact_id": i}),
        ("read_artifact", lambda i: {"artifact_id": i, "lines": [0, 20]}),
        ("query_artifact", lambda i: {"artifact_id": i, "limit": 20}),
        ("load_artifacts", lambda i: {"artifact_ids": [i]}),
    ]
    for who, scope in world.others.items():
        for op, call in direct(scope):
            with world.attempt(PROP, "cross_scope", f"{op} as {who}") as a:
                absent = new_artifact_id()
                got = _failure(partial(_sunk, world, op, partial(call, target)))
                control = _failure(partial(call, absent))
                _judge_absent(world, a, got, control, target, absent)
        with world.attempt(PROP, "cross_scope", f"list as {who}") as a:
            listed = world.read("list", partial(_listed, world, scope))
            world.sinks.add("response", listed)
            a.ok = target not in listed
            a.outcome = "not listed" if a.ok else "listed"
        for name, arguments in tools:
            with world.attempt(PROP, "cross_scope", f"{name} tool as {who}") as a:
                absent = new_artifact_id()
                seen = await _tool(world, box, name, arguments(target), scope)
                unseen = await _tool(world, box, name, arguments(absent), scope, sink=False)
                same = seen.is_error == unseen.is_error and _shape(seen.content, target) == _shape(
                    unseen.content, absent
                )
                a.ok = same and "not found" in seen.content
                a.disclosed = not same
                a.outcome = "the same answer as for an absent id" if a.ok else "differs from an absent id"


def _listed(world: World, scope: Scope) -> list[str]:
    return [d.artifact_id for d in world.vault.list(scope)]


def _sunk(world: World, op: str, call: Callable[[], object]) -> object:
    """Run a direct read; whatever it returns is what the caller got (a response sink)."""
    value = world.read(op, call, model_facing=False)
    world.sinks.add("response", value)
    return value


def _judge_absent(
    world: World,
    attempt: Attempt,
    got: tuple[str, str] | None,
    control: tuple[str, str] | None,
    target: str,
    absent: str,
) -> None:
    if got is not None:
        world.sinks.add("error", f"{got[0]}: {got[1]}")
    if got is None:
        attempt.disclosed, attempt.outcome = True, "read succeeded"
    elif control is None or got[0] != "NotFound" or _shape(got[1], target) != _shape(control[1], absent):
        attempt.disclosed, attempt.outcome = True, f"{got[0]}, unlike an absent id: existence disclosed"
    else:
        attempt.ok, attempt.outcome = True, "NotFound, identical to an absent id"


async def _tool(
    world: World, box: Toolbox, name: str, arguments: dict[str, Any], scope: Scope, *, sink: bool = True
) -> Observation:
    return await call_tool(
        world, box, name, arguments, scope=scope, run_id=f"run_probe_{world.trial}", call_id=f"call_{name}", sink=sink
    )


# -- sealed content through model-facing reads -------------------------------------------------------------------------


async def _sealed(world: World, box: Toolbox, secrets: Secrets) -> None:
    vault, owner = world.vault, world.owner
    direct: list[tuple[str, str, Callable[[], object]]] = [
        ("window", "runbook.md", lambda: read.window(vault, owner, secrets.runbook, lines=[0, 20])),
        ("grep", "runbook.md", lambda: read.grep(vault, owner, secrets.runbook, "cnry")),
        ("query", "ledger.jsonl", lambda: read.query(vault, owner, secrets.ledger, limit=20)),
    ]
    for op, filename, call in direct:
        with world.attempt(PROP, "sealed", f"{op} of sealed {filename}") as a:
            try:
                _sunk(world, op, call)
            except SealedArtifact as exc:
                world.sinks.add("error", f"{type(exc).__name__}: {exc}")
                a.ok, a.outcome = True, "SealedArtifact"
            else:
                a.outcome = "content returned"
    tools: list[tuple[str, str, dict[str, Any]]] = [
        ("read_artifact", "runbook.md", {"artifact_id": secrets.runbook, "lines": [0, 20]}),
        ("read_artifact", "runbook.md (pattern)", {"artifact_id": secrets.runbook, "pattern": "cnry"}),
        ("query_artifact", "ledger.jsonl", {"artifact_id": secrets.ledger, "limit": 20}),
    ]
    for name, what, arguments in tools:
        with world.attempt(PROP, "sealed", f"{name} tool on sealed {what}") as a:
            seen = await _tool(world, box, name, arguments, owner)
            a.ok = seen.is_error and "is sealed" in seen.content
            a.outcome = "refused: sealed" if a.ok else "not refused"
    for filename, artifact_id in (("runbook.md", secrets.runbook), ("screenshot.png", secrets.screenshot)):
        with world.attempt(PROP, "sealed", f"load_artifacts tool on sealed {filename}") as a:
            seen = await _tool(world, box, "load_artifacts", {"artifact_ids": [artifact_id]}, owner)
            results = json.loads(seen.content).get("results", []) if not seen.is_error else []
            a.ok = [r.get("error") for r in results] == ["SealedArtifact"]
            a.outcome = "refused: sealed" if a.ok else "loaded"
    with world.attempt(PROP, "sealed", "describe_artifact tool on sealed runbook.md (metadata only)") as a:
        seen = await _tool(world, box, "describe_artifact", {"artifact_id": secrets.runbook}, owner)
        a.ok = not seen.is_error and "usable by reference only" in seen.content
        a.outcome = "metadata, no content" if a.ok else "unexpected answer"
    with world.attempt(PROP, "sealed", "load_artifacts instructions never offer a sealed artifact") as a:
        text = instructions(vault, owner)
        world.sinks.add("observation", text)
        sealed = (secrets.runbook, secrets.ledger, secrets.screenshot, secrets.credentials)
        a.ok = not any(artifact_id in text for artifact_id in sealed)
        a.outcome = "none offered" if a.ok else "a sealed artifact offered"


# -- forged and replayed cursors ---------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _tampered_signature(token: str) -> str:
    prefix, body, mac = token.split(".")
    raw = bytearray(_unb64(mac))
    raw[0] ^= 0x01
    return f"{prefix}.{body}.{_b64(bytes(raw))}"


def _tampered_body(token: str) -> str:
    prefix, body, mac = token.split(".")
    document = json.loads(_unb64(body))
    document["p"] = {"from": 0}  # rewind to records the page did not grant
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return f"{prefix}.{_b64(canonical)}.{mac}"


def _forged(token: str, rng_bytes: bytes) -> str:
    prefix, body, _ = token.split(".")
    signed = f"{prefix}.{body}"
    mac = hmac.new(rng_bytes, signed.encode(), hashlib.sha256).digest()
    return f"{signed}.{_b64(mac)}"


async def _cursors(world: World, box: Toolbox, secrets: Secrets) -> None:
    """Forged cursors in the owner's scope (on the owner's own, canary-free records: refusing them is about
    paging integrity, a cursor never authorises), and the owner's cursor replayed from other scopes (on
    canary-laden records: anything returned there is a disclosure)."""
    vault, owner = world.vault, world.owner
    records = world.capture(jsonl(world.incident_records(200)), filename="events.jsonl").artifact_id
    cursor: str = read.query(vault, owner, records, limit=5)["next_cursor"]  # the owner's own page: not a probe
    foreign: str = read.query(vault, owner, secrets.records, limit=5)["next_cursor"]
    forged: list[tuple[str, str]] = [
        ("a cursor with a tampered signature", _tampered_signature(cursor)),
        ("a cursor with a rewritten position, signature kept", _tampered_body(cursor)),
        ("a truncated cursor", cursor[:-4]),
        ("a cursor re-signed with a guessed key", _forged(cursor, world.rng.randbytes(32))),
        ("a made-up cursor", "rvc1.bm90LWEtY3Vyc29y.AAAA"),
    ]
    for name, token in forged:
        with world.attempt(PROP, "cursor", name) as a:
            _cursor_refused(world, a, partial(read.query, vault, owner, records, limit=5, cursor=token))
    expiry = "a cursor presented after its expiry (injected clock, +2 h)"
    with world.attempt(PROP, "cursor", expiry) as a, world.clock.moved(timedelta(hours=2)):
        _cursor_refused(world, a, partial(read.query, vault, owner, records, limit=5, cursor=cursor))
    for who, scope in world.others.items():
        with world.attempt(PROP, "cursor", f"the owner's cursor replayed as {who}") as a:
            absent = new_artifact_id()
            target = secrets.records
            got = _failure(partial(_sunk, world, "query", partial(read.query, vault, scope, target, cursor=foreign)))
            control = _failure(partial(read.query, vault, scope, absent, cursor=foreign))
            _judge_absent(world, a, got, control, target, absent)
    with world.attempt(PROP, "cursor", "a tampered cursor through the query_artifact tool") as a:
        arguments = {"artifact_id": records, "limit": 5, "cursor": _tampered_signature(cursor)}
        seen = await _tool(world, box, "query_artifact", arguments, owner)
        a.ok = seen.is_error and "invalid cursor" in seen.content
        a.outcome = "refused: invalid cursor" if a.ok else "accepted"


def _cursor_refused(world: World, attempt: Attempt, call: Callable[[], object]) -> None:
    try:
        _sunk(world, "query", call)
    except InvalidCursor as exc:
        world.sinks.add("error", f"{type(exc).__name__}: {exc}")
        attempt.ok, attempt.outcome = True, f"InvalidCursor ({exc.reason})"
    else:
        attempt.outcome = "accepted"


# -- Ref resolution of another scope's id ----------------------------------------------------------------------------


async def _foreign_refs(world: World, box: Toolbox, secrets: Secrets) -> None:
    for who, scope in world.others.items():
        for filename, artifact_id in (("customers.jsonl", secrets.records), ("runbook.md", secrets.runbook)):
            with world.attempt(PROP, "foreign_ref", f"the owner's {filename} passed as a Ref by {who}") as a:
                absent = new_artifact_id()
                seen = await _tool(world, box, "excerpt", {"doc": artifact_id}, scope)
                control = await _tool(world, box, "excerpt", {"doc": absent}, scope, sink=False)
                same = seen.is_error == control.is_error and _shape(seen.content, artifact_id) == _shape(
                    control.content, absent
                )
                a.ok = same and seen.is_error and "no artifact" in seen.content
                a.disclosed = not same
                a.outcome = "BadRef, identical to an absent id" if a.ok else "resolved, or distinguishable from absent"
