"""The eval's world: scopes, seeded data with canaries, the sinks a model or operator sees, and the meters.

Nothing here judges a property; the probe modules do. This module gives them:

* :class:`Canaries`: the secret material planted in artifacts no probe may
  disclose, and a scan for it. Secrets are token-dense (every line holds a
  32-character random token), so any excerpt of 57 or more characters holds at
  least 24 characters of one token, and the scan looks for the 16 characters
  every such fragment must contain; base64 of a binary secret is matched by
  aligned 16-character pieces.
* :class:`Sinks`: every model-facing or operator-facing place a leak could
  land: requests that passed the LLM edge (what the model saw), observations,
  responses and error messages of probes, tool events and trajectories, audit
  records and log records (after the host's log redactor).
* :class:`Meters`: latency of every read (``time.perf_counter``), tokens
  returned per model-facing read (:func:`refvault.read.estimate_tokens`),
  records scanned per query.
* :class:`World`: the vault, its settable clock, the scopes and the
  ``attempt`` context that scans the sinks after each attempt.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import re
import stat
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from refvault.blobs.base import BlobKey
from refvault.evidence import Requirement
from refvault.model import Descriptor, Disclosure, Scope
from refvault.vault import Vault

__all__ = ["Attempt", "Canaries", "EvalClock", "Meters", "Sinks", "World"]

T = TypeVar("T")

SOURCE = "infra.incident-events"
REGION = "eu-west"
OTHER_REGION = "us-east"
SERVICES = ("checkout", "payments", "search", "auth", "inventory")
ORDINARY = ("info", "warning", "error")
CANARY_TAG = "cnry"
TOOL_LOGGER = "refvault.eval.tools"


class EvalClock:
    """The vault's clock: fixed during a run (so every verdict is reproducible), moved only on purpose."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    @contextmanager
    def moved(self, delta: timedelta) -> Iterator[None]:
        """Run the block with the clock ``delta`` later (an injected clock, never sleeping)."""
        saved = self.now
        self.now = saved + delta
        try:
            yield
        finally:
            self.now = saved


@dataclass(slots=True)
class Attempt:
    """One probe: what it tried, whether the build held, and what it saw (never content).

    ``ok`` means the property held (detected, blocked, carried, caught, or for
    a control, allowed). ``disclosed`` means canary bytes reached a sink, or
    another scope's artifact answered differently from an absent one (its
    existence or metadata disclosed).
    """

    prop: str
    kind: str
    name: str
    trial: int
    ok: bool = False
    outcome: str = ""
    disclosed: bool = False
    sinks: tuple[str, ...] = ()
    control: bool = False
    concluded: bool | None = None
    false_absence: bool = False
    committed: bool | None = None
    unsupported: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "property": self.prop,
            "kind": self.kind,
            "name": self.name,
            "trial": self.trial,
            "ok": self.ok,
            "outcome": self.outcome,
            "disclosed": self.disclosed,
        }
        if self.sinks:
            out["sinks"] = list(self.sinks)
        if self.control:
            out["control"] = True
        if self.concluded is not None:
            out["concluded"] = self.concluded
            out["false_absence"] = self.false_absence
        if self.committed is not None:
            out["committed"] = self.committed
            out["unsupported"] = self.unsupported
        return out


class Canaries:
    """Secret material that must never reach a sink, and the scan for it.

    Every registered piece is 16 characters of the base64 alphabet (hex
    included), so the scan finds each run of that alphabet in the text and
    looks up every 16-character window of it: linear in the text, independent
    of how many pieces there are.
    """

    WIDTH = 16
    _RUN = re.compile(r"[A-Za-z0-9+/]{16,}")

    def __init__(self) -> None:
        self._pieces: set[str] = set()

    def token(self, rng: random.Random) -> str:
        """A fresh 32-character canary token (registered)."""
        token = f"{CANARY_TAG}{rng.getrandbits(112):028x}"
        self._pieces.add(token[8:24])
        return token

    def binary(self, data: bytes) -> None:
        """Register a binary secret: its base64, in aligned 16-character pieces."""
        encoded = base64.b64encode(data).decode("ascii")
        self._pieces.update(encoded[i : i + self.WIDTH] for i in range(0, len(encoded) - self.WIDTH, self.WIDTH))

    def found(self, text: str) -> bool:
        pieces, width = self._pieces, self.WIDTH
        for run in self._RUN.finditer(text):
            value = run.group()
            if any(value[i : i + width] in pieces for i in range(len(value) - width + 1)):
                return True
        return False


def as_text(value: object) -> str:
    """Any sink entry as text to scan: JSON where it can be, ``repr`` of what it cannot."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
    elif is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    try:
        return json.dumps(value, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


class Sinks:
    """What a model or an operator can see, in order: ``(sink name, text)``."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def add(self, sink: str, value: object) -> None:
        text = as_text(value)
        with self._lock:
            self.entries.append((sink, text))

    def mark(self) -> int:
        with self._lock:
            return len(self.entries)

    def hits(self, canaries: Canaries, start: int = 0, end: int | None = None) -> tuple[str, ...]:
        """The names of the sinks, among entries ``[start, end)``, that hold canary material."""
        with self._lock:
            entries = self.entries[start:end]
        return tuple(sorted({sink for sink, text in entries if canaries.found(text)}))


_STANDARD_RECORD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class LogCapture(logging.Handler):
    """Every record of the ``refvault`` loggers, as a sink entry: message, extras and exception text."""

    def __init__(self, sinks: Sinks) -> None:
        super().__init__(logging.DEBUG)
        self.sinks = sinks

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a broken format: keep its parts
            message = f"{record.msg!r} {record.args!r}"
        extras = {key: value for key, value in record.__dict__.items() if key not in _STANDARD_RECORD}
        parts = [record.name, record.levelname, message, as_text(extras)]
        if record.exc_text:
            parts.append(record.exc_text)
        elif record.exc_info and record.exc_info[1] is not None:
            parts.append(repr(record.exc_info[1]))
        self.sinks.add("log", " ".join(parts))


@dataclass(slots=True)
class Meters:
    """Per-read figures: latency by operation, tokens returned, records scanned."""

    latency: dict[str, list[float]] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=list)
    scanned: list[int] = field(default_factory=list)

    def timed(self, op: str, call: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return call()
        finally:
            self.latency.setdefault(op, []).append(time.perf_counter() - started)

    def returned(self, value: object) -> None:
        """Count what a model-facing read returned: its tokens, and for a query the records it scanned."""
        from refvault.read import estimate_tokens

        self.tokens.append(estimate_tokens(as_text(value)))
        if isinstance(value, dict) and isinstance(value.get("scanned_records"), int):
            self.scanned.append(value["scanned_records"])

    def summary(self) -> dict[str, Any]:
        everything = [s for samples in self.latency.values() for s in samples]
        return {
            "latency_ms": {
                "all": _spread(everything),
                **{op: _spread(samples) for op, samples in sorted(self.latency.items())},
            },
            "tokens_returned": _counts(self.tokens),
            "records_scanned": _counts(self.scanned),
        }


def _spread(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"calls": 0, "median": None, "p95": None}
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "calls": len(ordered),
        "median": round(statistics.median(ordered) * 1000, 3),
        "p95": round(p95 * 1000, 3),
    }


def _counts(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"reads": 0, "median": None, "p95": None, "max": None, "total": 0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "reads": len(ordered),
        "median": statistics.median_low(ordered),
        "p95": p95,
        "max": ordered[-1],
        "total": sum(ordered),
    }


class World:
    """Everything the probes share in one run: vault, clock, scopes, canaries, sinks, meters, attempts."""

    def __init__(self, vault: Vault, clock: EvalClock, nonce: str) -> None:
        self.vault = vault
        self.clock = clock
        self.canaries = Canaries()
        self.sinks = Sinks()
        self.meters = Meters()
        self.attempts: list[Attempt] = []
        self._covered: list[tuple[int, int]] = []  # sink entries written during attempts
        self.owner = Scope(f"eval-{nonce}-acme", "ana", "incident-1")
        self.others = {
            "another tenant": Scope(f"eval-{nonce}-globex", "ana", "incident-1"),
            "another user": Scope(f"eval-{nonce}-acme", "bob", "incident-1"),
            "another session": Scope(f"eval-{nonce}-acme", "ana", "incident-2"),
        }
        self.tenants = (self.owner.tenant, self.others["another tenant"].tenant)
        self.trial = 0
        self.rng = random.Random(0)
        self.log = LogCapture(self.sinks)
        vault.add_audit_sink(lambda record: self.sinks.add("audit", record))

    @property
    def now(self) -> datetime:
        return self.clock.now

    def start_trial(self, seed: int, trial: int) -> None:
        self.trial = trial
        self.rng = random.Random(f"refvault-eval:{seed}:{trial}")

    @contextmanager
    def attempt(self, prop: str, kind: str, name: str, *, control: bool = False) -> Iterator[Attempt]:
        """One attempt: run the block, then scan every sink it touched for canaries.

        An unexpected exception fails the attempt (named by type only: its
        message could carry content) instead of stopping the run; with
        ``$REFVAULT_EVAL_DEBUG`` set it is re-raised, for whoever debugs the build.
        """
        attempt = Attempt(prop, kind, name, self.trial, control=control)
        mark = self.sinks.mark()
        try:
            yield attempt
        except Exception as exc:
            attempt.ok = False
            attempt.outcome = f"unexpected {type(exc).__name__}"
            if os.environ.get("REFVAULT_EVAL_DEBUG"):
                raise
        self._covered.append((mark, self.sinks.mark()))
        hits = self.sinks.hits(self.canaries, mark)
        if hits:
            attempt.disclosed = True
            attempt.sinks = hits
        if attempt.disclosed or attempt.unsupported or attempt.false_absence:
            attempt.ok = False
        self.attempts.append(attempt)

    def stray(self) -> tuple[str, ...]:
        """Sinks holding canary material in entries written outside every attempt (setup, captures)."""
        found: set[str] = set()
        start = 0
        for begin, end in [*self._covered, (self.sinks.mark(), self.sinks.mark())]:
            found.update(self.sinks.hits(self.canaries, start, begin))
            start = end
        return tuple(sorted(found))

    # -- data ------------------------------------------------------------------------

    def incident_records(
        self,
        count: int,
        *,
        region: str = REGION,
        critical: frozenset[int] = frozenset(),
    ) -> list[dict[str, Any]]:
        """Seeded incident events; ``critical`` holds the indexes of the critical ones (no other is critical)."""
        begin = self.now - timedelta(minutes=45)
        records = []
        for index in range(count):
            severity = "critical" if index in critical else self.rng.choice(ORDINARY)
            records.append(
                {
                    "event_id": f"evt_{index:05d}",
                    "ts": (begin + timedelta(milliseconds=index * 37)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                    "region": region,
                    "service": self.rng.choice(SERVICES),
                    "severity": severity,
                    "latency_ms": self.rng.randint(3, 9000),
                    "trace_id": f"{self.rng.getrandbits(128):032x}",
                }
            )
        return records

    def secret_lines(self, count: int) -> bytes:
        """Token-dense secret text: one canary token per line."""
        return "".join(self.canaries.token(self.rng) + "\n" for _ in range(count)).encode()

    def secret_records(self, count: int) -> bytes:
        lines = [
            json.dumps({"customer": f"c{index:04d}", "secret": self.canaries.token(self.rng)}, separators=(",", ":"))
            for index in range(count)
        ]
        return ("\n".join(lines) + "\n").encode()

    def secret_binary(self, size: int) -> bytes:
        data = b"\x89PNG\r\n\x1a\n" + self.rng.randbytes(size - 8)
        self.canaries.binary(data)
        return data

    def window(self) -> tuple[str, str]:
        """The capture window every incident snapshot covers (and the decision requires)."""
        return utc(self.now - timedelta(minutes=50)), utc(self.now - timedelta(minutes=40))

    def requirement(self, *, regions: tuple[str, ...] = (REGION,)) -> Requirement:
        """What the restart decision needs: this source, these regions over the window, observed within 30 min."""
        start, end = self.window()
        region: str | list[str] = regions[0] if len(regions) == 1 else list(regions)
        coverage = {"region": region, "start_inclusive": start, "end_exclusive": end}
        return Requirement(source=SOURCE, coverage=coverage, max_age=timedelta(minutes=30))

    def capture(
        self,
        data: bytes,
        *,
        media_type: str = "application/x-ndjson",
        filename: str | None = None,
        status: str = "complete",
        regions: tuple[str, ...] = (REGION,),
        omissions: tuple[dict[str, Any], ...] = (),
        observed: datetime | None = None,
        source: str = SOURCE,
        expires_at: datetime | None = None,
        disclosure: Disclosure = "model",
        scope: Scope | None = None,
        idempotency_key: str | None = None,
    ) -> Descriptor:
        """Capture an incident snapshot with its provenance and coverage, in the owner's scope by default."""
        start, end = self.window()
        observed_at = observed or self.now - timedelta(minutes=5)
        return self.vault.put(
            scope or self.owner,
            data,
            media_type=media_type,
            filename=filename,
            tool_call_id=f"call_capture_{self.rng.getrandbits(32):08x}",
            source_version={
                "source_id": source,
                "snapshot_id": f"snap_{self.rng.getrandbits(32):08x}",
                "observed_at": utc(observed_at),
            },
            completeness={
                "status": status,
                "coverage": {
                    "region": regions[0] if len(regions) == 1 else list(regions),
                    "start_inclusive": start,
                    "end_exclusive": end,
                },
                "omissions": [dict(o) for o in omissions],
            },
            schema_version="incident-snapshot.v1",
            expires_at=expires_at,
            disclosure=disclosure,
            idempotency_key=idempotency_key,
        )

    # -- reads ---------------------------------------------------------------------------

    def read(self, op: str, call: Callable[[], T], *, model_facing: bool = True) -> T:
        """Run a read, timing it; count what a model-facing read returned."""
        value = self.meters.timed(op, call)
        if model_facing:
            self.meters.returned(value)
        return value

    # -- damage (the embedded store's files, behind the vault's back) ----------------------

    @contextmanager
    def damaged(self, artifact_id: str, damage: Callable[[bytes], bytes]) -> Iterator[None]:
        """Replace the stored bytes of the owner's ``artifact_id`` by ``damage(bytes)`` for the block."""
        manifest = self.vault.catalog.find(self.owner, artifact_id)
        assert manifest is not None
        with self.damaged_key(manifest.key, damage):
            yield

    @contextmanager
    def damaged_key(self, key: BlobKey, damage: Callable[[bytes], bytes]) -> Iterator[None]:
        """Replace the blob file of ``key`` by ``damage(bytes)`` behind the vault's back; restore it after."""
        path = self.blob_path(key)
        mode = path.stat().st_mode
        original = path.read_bytes()
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
        try:
            path.write_bytes(damage(original))
            yield
        finally:
            path.write_bytes(original)
            path.chmod(stat.S_IMODE(mode))

    def blob_path(self, key: BlobKey) -> Path:
        from refvault.blobs.filesystem import FilesystemBlobStore

        blobs = self.vault.blobs
        if not isinstance(blobs, FilesystemBlobStore):
            raise RuntimeError("the eval damages blobs of the embedded store only")
        record = self.vault.catalog.blob(key)
        if record is None or record.inline is not None:
            raise RuntimeError("the eval damages blobs stored as files (over the inline limit) only")
        return blobs.root / "blobs" / key.namespace / key.digest[:2] / key.digest


def flip(data: bytes) -> bytes:
    """``data`` with one bit of its middle byte flipped."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r, separators=(",", ":")) for r in records) + "\n").encode()


def log_lines(records: list[dict[str, Any]]) -> bytes:
    """The same events as a plain-text log, one line each."""
    lines = [
        f"{r['ts']} {r['region']} {r['severity'].upper():8} {r['service']} event={r['event_id']} "
        f"latency={r['latency_ms']}ms trace={r['trace_id']}"
        for r in records
    ]
    return ("\n".join(lines) + "\n").encode()


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
