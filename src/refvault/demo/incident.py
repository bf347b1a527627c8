"""The incident the demo investigates: a simulated event source, a runbook, and the scenario's fixed moments.

Everything here is deterministic (fixed seeds, fixed times), so two runs capture byte-identical snapshots:
the source plays back observations at scripted moments of 2026-11-06 rather than reading a clock.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "DECISION_AT",
    "INCIDENT_DAY",
    "RUNBOOK",
    "RUNBOOK_SPAN",
    "SCHEMA_VERSION",
    "SOURCE_ID",
    "IncidentSource",
    "Snapshot",
    "iso",
]

SOURCE_ID = "infra.incident-events"
SCHEMA_VERSION = "example.incident-snapshot.v1"
INCIDENT_DAY = datetime(2026, 11, 6, tzinfo=UTC)
DECISION_AT = INCIDENT_DAY.replace(hour=4, minute=52)  # when the restart is decided: the gate's explicit time

# When the source is observed, capture after capture (the demo's clock for the source, not the wall clock).
OBSERVATIONS = (
    INCIDENT_DAY.replace(hour=4, minute=39, second=50),
    INCIDENT_DAY.replace(hour=4, minute=44, second=10),
    INCIDENT_DAY.replace(hour=4, minute=50, second=20),
)
FIRST_SNAPSHOT_EVENTS = 12_840  # eu-west, 04:00-04:10, the first observation

_SERVICES = ("checkout", "payments", "cart", "search", "auth", "inventory")
_SEVERITIES = ("info", "warning", "error")  # the window holds no critical event: the query must say so
_WEIGHTS = (62, 27, 11)
_MESSAGES = {
    "info": ("request served in {ms} ms", "autoscaler added {n} instances", "cache warmed ({n} keys)"),
    "warning": ("p99 latency {ms} ms above SLO", "retry budget {pct}% consumed", "connection pool {pct}% used"),
    "error": ("upstream {peer} returned HTTP {status}", "timeout after {ms} ms calling {peer}"),
}


def iso(moment: datetime) -> str:
    """``2026-11-06T04:00:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One observation of the source: the records collected, and what the capture may claim about them."""

    data: bytes  # JSON Lines, one event per line
    records: int
    source_version: dict[str, Any]
    completeness: dict[str, Any]


@dataclass(slots=True)
class IncidentSource:
    """``infra.incident-events``, played back: each :meth:`observe` is the next scripted observation.

    ``partitioned`` names regions whose collector is cut off: asked for, they are not collected, and the
    snapshot says so (status ``partial``, an omission per region).
    """

    partitioned: set[str] = field(default_factory=set)
    observed: int = 0

    def observe(self, regions: Sequence[str], start: datetime, end: datetime) -> Snapshot:
        moment = OBSERVATIONS[min(self.observed, len(OBSERVATIONS) - 1)]
        self.observed += 1
        collected = [region for region in regions if region not in self.partitioned]
        events: list[dict[str, Any]] = []
        for region in collected:
            count = _event_count(region, start, moment)
            events.extend(_events(region, start, end, count, seed=f"{region}/{iso(start)}/{iso(moment)}"))
        events.sort(key=lambda event: (event["ts"], event["event_id"]))
        lines = [json.dumps(event, separators=(",", ":")) for event in events]
        coverage: dict[str, Any] = {
            "region": collected[0] if len(collected) == 1 else collected,
            "start_inclusive": iso(start),
            "end_exclusive": iso(end),
        }
        omissions = [
            {
                "region": region,
                "start_inclusive": iso(start),
                "end_exclusive": iso(end),
                "reason": "collector partition",
            }
            for region in regions
            if region in self.partitioned
        ]
        snapshot_id = f"infra_snapshot_{moment:%Y%m%d_%H%M%S}"
        return Snapshot(
            data=("\n".join(lines) + "\n").encode(),
            records=len(lines),
            source_version={"source_id": SOURCE_ID, "snapshot_id": snapshot_id, "observed_at": iso(moment)},
            completeness={
                "status": "partial" if omissions else "complete",
                "coverage": coverage,
                "records": len(lines),
                "omissions": omissions,
            },
        )


def _event_count(region: str, start: datetime, observed: datetime) -> int:
    rng = random.Random(f"count/{region}/{iso(start)}/{iso(observed)}")
    if (region, start.hour, start.minute) == ("eu-west", 4, 0):
        late = 0 if observed == OBSERVATIONS[0] else rng.randrange(3, 40)  # a later export has a few late events
        return FIRST_SNAPSHOT_EVENTS + late
    return rng.randrange(9_000, 12_000)


def _events(region: str, start: datetime, end: datetime, count: int, *, seed: str) -> list[dict[str, Any]]:
    """``count`` events of ``region`` spread over [start, end)."""
    rng = random.Random(seed)
    span = (end - start).total_seconds()
    lines: list[dict[str, Any]] = []
    for index in range(count):
        service = rng.choice(_SERVICES)
        severity = rng.choices(_SEVERITIES, _WEIGHTS)[0]
        message = rng.choice(_MESSAGES[severity]).format(
            ms=rng.randint(40, 9000),
            n=rng.randint(2, 40),
            pct=rng.randint(5, 100),
            status=rng.choice((500, 502, 503, 504)),
            peer=rng.choice([s for s in _SERVICES if s != service]),
        )
        moment = start + timedelta(seconds=span * index / count + rng.random() * span / count)
        lines.append(
            {
                "event_id": f"evt_{rng.getrandbits(40):010x}",
                "ts": f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z",
                "region": region,
                "service": service,
                "host": f"{service}-{region}-{rng.randint(1, 24):02d}",
                "severity": severity,
                "message": message,
                "latency_ms": rng.randint(3, 12_000),
            }
        )
    return lines


RUNBOOK_SPAN = (
    "Drain checkout behind the maintenance flag before any restart: fleetctl drain --service checkout "
    "--region eu-west --grace 90s, then confirm the drain gauge reads zero in-flight orders."
)
"""A distinctive line of the runbook: the demo checks it appears in no request the model saw."""

RUNBOOK = f"""# Runbook: restarting the checkout service

Owner: payments-platform on-call. Sealed: pass it to tools by reference; never paste it into a chat.

## Preconditions

1. An incident is open and the incident commander approved the restart.
2. Evidence for every region being restarted is complete and at most 15 minutes old.
3. No deploy of checkout is in progress (deployctl status checkout shows idle).

## Drain

4. {RUNBOOK_SPAN}
5. Page the payments on-call if the drain has not finished after 5 minutes.

## Restart

6. Restart one region at a time: fleetctl restart --service checkout --region <region> --batch 10%.
7. Watch the error-rate panel for 3 minutes after each batch; stop at the first regression.

## Recover

8. Lift the maintenance flag and post the restart summary in the incident channel.
""".encode()
