"""``refvault demo``: a real end-to-end walk through the vault's guarantees.

It runs offline on a fresh temporary store (or on ``--store``, which is kept)
and checks, with the real vault, that:

1. a captured file gets a descriptor (opaque id, content hash, scope, ...);
2. capturing the same bytes again mints a new id with the same content hash,
   and the bytes are stored once;
3. another tenant cannot see the artifact: it gets the same ``NotFound`` as an
   id that never existed;
4. ``verify`` re-hashes the store and finds nothing wrong;
5. reading the artifact back yields bytes whose SHA-256 is the content hash;
6. (temporary store only) one byte flipped on disk is caught: the read is
   refused with ``IntegrityError`` and ``verify`` names both artifacts; a
   fresh capture of the same bytes heals the blob.

Each step is a check; :func:`run_demo` returns 0 only if all of them pass.
Keep the list in step with the ``refvault demo`` help in :mod:`refvault.cli`.
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from refvault.cli import descriptor_json, make_console, plural, render_descriptor
from refvault.errors import IntegrityError, NotFound
from refvault.ids import new_artifact_id
from refvault.model import Descriptor, Scope
from refvault.vault.vault import Vault

__all__ = ["incident_sample", "run_demo"]

SAMPLE_RECORDS = 200
SAMPLE_SEED = 20241103

_SERVICES = ("checkout", "payments", "search", "auth", "inventory", "notifications")
_REGIONS = ("eu-west-1", "us-east-1", "ap-southeast-2")
_SEVERITIES = ("info", "warning", "error", "critical")
_SEVERITY_WEIGHTS = (50, 30, 15, 5)
_EVENTS = {
    "info": ("deploy {version} rolled out to {pct}% of hosts", "autoscaler added {n} instances"),
    "warning": ("p99 latency {ms} ms above SLO", "retry budget {pct}% consumed", "connection pool {pct}% saturated"),
    "error": (
        "upstream returned HTTP {status}",
        "timeout after {ms} ms calling {peer}",
        "TLS handshake failed to {peer}",
    ),
    "critical": ("error rate {pct}% over 5 min", "health checks failing on {n} hosts", "queue backlog {n}k messages"),
}


def incident_sample(count: int = SAMPLE_RECORDS, seed: int = SAMPLE_SEED) -> bytes:
    """A deterministic, realistic JSON Lines sample of ``count`` incident records."""
    rng = random.Random(seed)
    start = datetime(2024, 11, 3, 9, 0, tzinfo=UTC)
    lines = []
    for index in range(count):
        service = rng.choice(_SERVICES)
        severity = rng.choices(_SEVERITIES, _SEVERITY_WEIGHTS)[0]
        template = rng.choice(_EVENTS[severity])
        message = template.format(
            version=f"v{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 9)}",
            pct=rng.randint(5, 100),
            n=rng.randint(2, 40),
            ms=rng.randint(250, 9000),
            status=rng.choice((500, 502, 503, 504, 429)),
            peer=rng.choice([s for s in _SERVICES if s != service]),
        )
        record = {
            "id": f"INC-{104_000 + index}",
            "ts": (start + timedelta(seconds=index * 41 + rng.randint(0, 40))).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "service": service,
            "region": rng.choice(_REGIONS),
            "host": f"{service}-{rng.randint(1, 12):02d}",
            "severity": severity,
            "message": message,
            "latency_ms": rng.randint(3, 12_000),
            "trace_id": f"{rng.getrandbits(128):032x}",
            "acknowledged": rng.random() < 0.6,
        }
        lines.append(json.dumps(record, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode("utf-8")


@dataclass(slots=True)
class _Walk:
    """What the demo found, step by step."""

    store: str | None
    checks: list[dict[str, Any]] = field(default_factory=list)
    descriptor: Descriptor | None = None

    @property
    def ok(self) -> bool:
        return all(check["ok"] for check in self.checks)

    def check(self, name: str, ok: bool, detail: str, **facts: Any) -> None:
        self.checks.append({"name": name, "ok": ok, "detail": detail, **facts})

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "store": self.store,
            "store_kept": self.store is not None,
            "descriptor": None if self.descriptor is None else descriptor_json(self.descriptor),
            "checks": self.checks,
        }


@contextmanager
def _store(location: str | None) -> Iterator[tuple[Path, bool]]:
    if location is not None:
        yield Path(location), True
        return
    with tempfile.TemporaryDirectory(prefix="refvault-demo-") as tmp:
        yield Path(tmp) / "store", False


def _walk(vault: Vault, walk: _Walk) -> None:
    owner = Scope("acme", "ana", "incident-review")
    outsider = Scope("globex", "ana", "incident-review")
    sample = incident_sample()

    first = vault.put(
        owner,
        sample,
        media_type="application/x-ndjson",
        filename="incidents.jsonl",
        tool_call_id="call_fetch_incidents_1",
        source_version={"system": "pager-export", "cursor": "2024-11-03T09:00Z"},
        completeness={"status": "complete", "records": SAMPLE_RECORDS},
    )
    walk.descriptor = first
    walk.check(
        "capture",
        first.artifact_id.startswith("art_") and first.size == len(sample),
        f"captured {plural(SAMPLE_RECORDS, 'record')} ({plural(len(sample), 'byte')}) as {first.artifact_id}",
        artifact_id=first.artifact_id,
    )

    second = vault.put(owner, sample, media_type="application/x-ndjson", filename="incidents.jsonl")
    walk.check(
        "dedup",
        second.artifact_id != first.artifact_id and second.content_hash == first.content_hash,
        f"a second capture of the same bytes got a new id {second.artifact_id} and the same content hash",
        artifact_id=second.artifact_id,
        content_hash=second.content_hash,
    )

    walk.check(
        "isolation",
        _not_found(vault, outsider, first.artifact_id) == _not_found(vault, outsider, new_artifact_id()) == "NotFound",
        "tenant 'globex' gets NotFound for it, exactly as for an id that never existed",
    )

    report = vault.verify()
    walk.check(
        "verify",
        report.ok,
        f"re-hashed {plural(report.blobs_checked, 'blob')} ({plural(report.bytes_checked, 'byte')}) behind "
        f"{plural(report.artifacts, 'artifact')}: {plural(len(report.problems), 'problem')}",
        blobs_checked=report.blobs_checked,
        artifacts=report.artifacts,
        problems=len(report.problems),
    )

    digest = hashlib.sha256()
    with vault.stream(owner, first.artifact_id) as stream:
        for chunk in stream.iter_chunks():
            digest.update(chunk)
    read_hash = "sha256:" + digest.hexdigest()
    walk.check(
        "read back",
        read_hash == first.content_hash,
        "read the artifact back; its SHA-256 equals the content hash",
        sha256=read_hash,
    )


def _tamper(vault: Vault, walk: _Walk, root: Path) -> None:
    """Flip one byte of the stored blob behind the vault's back; the vault must notice."""
    owner = Scope("acme", "ana", "incident-review")
    assert walk.descriptor is not None
    first = walk.descriptor
    digest = first.content_hash.removeprefix("sha256:")
    [path] = root.glob(f"blobs/*/{digest[:2]}/{digest}")
    original = path.read_bytes()
    path.chmod(0o640)
    path.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    try:
        vault.read_bytes(owner, first.artifact_id)
        refused = False
    except IntegrityError:
        refused = True
    report = vault.verify()
    named = sorted(report.problems[0].artifact_ids) if report.problems else []
    vault.put(owner, original, media_type="application/x-ndjson", filename="incidents.jsonl")
    healed = vault.read_bytes(owner, first.artifact_id) == original and vault.verify().ok
    walk.check(
        "tamper",
        refused and len(named) == 2 and healed,
        f"flipped one byte on disk: read refused (IntegrityError), verify named {plural(len(named), 'artifact')}, "
        "a fresh capture of the same bytes healed the blob",
        refused=refused,
        named=named,
        healed=healed,
    )


def _not_found(vault: Vault, scope: Scope, artifact_id: str) -> str:
    """How a read of ``artifact_id`` in ``scope`` fails, as an error type name (message has the id)."""
    try:
        vault.describe(scope, artifact_id)
    except NotFound as exc:
        expected = f"artifact {artifact_id} not found in this scope"
        return "NotFound" if str(exc) == expected else "NotFound (unexpected message)"
    return "visible"


def run_demo(store: str | None, as_json: bool, *, open_vault: Callable[[Path], Vault] = Vault.open) -> int:
    """Run the walk; print JSON or a human report; return 0 if every check passed, else 1.

    ``store`` is kept (and never tampered with); without it the walk runs on a
    temporary store. ``open_vault`` opens the store (the CLI's names it in errors).
    """
    with _store(store) as (location, kept):
        walk = _Walk(store=str(location) if kept else None)
        with open_vault(location) as vault:
            _walk(vault, walk)
            if not kept:  # never damage a store the user asked to keep
                _tamper(vault, walk, location)
    if as_json:
        print(json.dumps(walk.to_dict(), indent=2))
    else:
        _print_human(walk, kept=kept)
    return 0 if walk.ok else 1


def _print_human(walk: _Walk, *, kept: bool) -> None:
    from rich.text import Text

    # Off a terminal the console is wide, so the panel keeps the content hash on one line.
    console = make_console(soft_wrap=True)
    if walk.descriptor is not None:
        console.print(render_descriptor(walk.descriptor, title="captured incidents.jsonl"))
    for check in walk.checks:
        mark = ("✔ ", "green") if check["ok"] else ("✘ ", "bold red")
        console.print(Text.assemble(mark, (f"{check['name']:<10} ", "bold"), check["detail"]))
    where = f"store kept at {walk.store}" if kept else "temporary store removed"
    verdict = "demo passed" if walk.ok else "demo FAILED"
    console.print(Text(f"{verdict} ({where})", style="bold green" if walk.ok else "bold red"))
