"""Redaction benchmark: ``redact_bytes`` over a large JSON Lines artifact, beside one plain ``re.sub`` pass.

Run with ``.venv/bin/python bench/redaction.py`` (a 64 MiB artifact); ``--quick`` uses 8 MiB.

The artifact is generated deterministically (fixed seed): log-like JSON Lines records of about 350 bytes
(timestamp, level, service, host, request and trace ids, method, path, status, latency, user agent, a
message), of which some carry planted values: an e-mail and a phone number in a ``user`` object (8 %), a
client IPv4 (5 %) or IPv6 (1 %) address, a card number (2 %) or an IBAN (1 %) in the message, and secrets
(2 %: an ``Authorization: Bearer`` JWT header, an AWS access key, a GitHub token or an ``api_key=`` value in
the message).

Measured, in the same run with interleaved repetitions: ``redact_bytes(data, media_type="application/x-ndjson",
redactor=...)`` for ``pii.v1`` and ``secrets.v1``, and the baseline, one ``re.sub`` of an e-mail regex over the
same bytes (what a single-pattern scrubber costs; it finds no phone, card, key or secret). Reported: MB/s of
input for each, and each redactor's rate as a fraction of the baseline's.

No target: the issue asks for the figures beside the baseline. Absolute rates on a shared machine are noise; the
ratio to the baseline measured in the same run is the result.
"""

from __future__ import annotations

import base64
import json
import random
import re
import statistics
import string
import sys
import time
from collections.abc import Callable, Sequence

from harness import MiB, command_line, interleave, machine, make_parser, total_time

from refvault.content.redactors import RedactionOutcome, redact_bytes

SEED = 20261203
MEDIA_TYPE = "application/x-ndjson"
BASELINE = re.compile(rb"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")

WORDS = (
    "order", "shipped", "payment", "failed", "retry", "user", "login", "cache", "miss", "upstream", "timeout",
    "connected", "closed", "queue", "worker", "job", "started", "finished", "invoice", "created", "refund",
    "processed", "session", "expired", "refreshed", "config", "loaded", "request", "served", "slow", "query",
    "index", "rebuilt", "deploy", "rolled", "back", "healthy", "degraded",
)  # fmt: skip
SERVICES = ("checkout", "auth", "search", "billing", "catalog", "gateway")
PATHS = ("/api/v1/orders/{n}", "/api/v1/users/{n}/profile", "/static/app.{n}.js", "/health", "/api/v2/search?q=item")
AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
    "curl/8.5.0",
    "python-httpx/0.28.1",
)
ALNUM = string.ascii_letters + string.digits


def luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    total = 0
    for i, ch in enumerate(reversed(body)):
        x = int(ch)
        if i % 2 == 0:
            x = x * 2 - 9 if x > 4 else x * 2
        total += x
    return body + str((10 - total % 10) % 10)


def iban_de(rng: random.Random) -> str:
    bban = "".join(rng.choice(string.digits) for _ in range(18))
    check = 98 - int(bban + "131400") % 97  # D=13, E=14, then 00
    return f"DE{check:02d}{bban}"


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwt(rng: random.Random) -> str:
    header = b64url(b'{"alg":"HS256","typ":"JWT"}')
    payload = b64url(json.dumps({"sub": str(rng.randrange(10**9)), "iat": 1700000000 + rng.randrange(10**6)}).encode())
    return f"{header}.{payload}.{''.join(rng.choice(ALNUM + '-_') for _ in range(43))}"


def secret_message(rng: random.Random) -> tuple[str, dict[str, str]]:
    """A message with a secret in it, and any headers that carry one."""
    choice = rng.randrange(4)
    if choice == 0:
        return "upstream call authorised", {"authorization": f"Bearer {jwt(rng)}"}
    if choice == 1:
        key = "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
        return f"loaded credentials for profile default: {key}", {}
    if choice == 2:
        return f"cloning with ghp_{''.join(rng.choice(ALNUM) for _ in range(36))} failed", {}
    return f"retrying with api_key={''.join(rng.choice(ALNUM) for _ in range(32))}", {}


def record(rng: random.Random, i: int) -> dict[str, object]:
    msg = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
    rec: dict[str, object] = {
        "ts": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{i * 7 % 60:02d}.{i % 1000:03d}Z",
        "level": ("info", "info", "info", "warn", "error", "debug")[i % 6],
        "service": SERVICES[i % len(SERVICES)],
        "host": f"web-{i % 17}.eu-west-1.internal",
        "request_id": f"{rng.getrandbits(128):032x}",
        "trace_id": f"{rng.getrandbits(64):016x}",
        "method": ("GET", "GET", "POST", "PUT", "DELETE")[i % 5],
        "path": rng.choice(PATHS).format(n=rng.randint(1000, 999999)),
        "status": rng.choice((200, 200, 200, 201, 204, 304, 400, 404, 500)),
        "latency_ms": round(rng.lognormvariate(3, 1), 3),
        "user_agent": rng.choice(AGENTS),
    }
    roll = rng.random()
    if roll < 0.08:
        first, last = rng.choice(("ana", "ben", "chen", "dara", "eli")), rng.choice(("kim", "ortiz", "smith", "ng"))
        rec["user"] = {
            "id": rng.randint(1, 10**6),
            "email": f"{first}.{last}{rng.randint(1, 999)}@example.com",
            "phone": f"+44 20 7946 {rng.randint(0, 9999):04d}",
        }
    elif roll < 0.13:
        rec["client_ip"] = f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    elif roll < 0.14:
        rec["client_ip"] = f"2001:db8:{rng.getrandbits(16):x}::{rng.getrandbits(16):x}"
    elif roll < 0.16:
        msg += f" card {luhn_complete(rng, '4', 16)} declined"
    elif roll < 0.17:
        msg += f" refund to {iban_de(rng)}"
    elif roll < 0.19:
        extra, headers = secret_message(rng)
        msg += " " + extra
        if headers:
            rec["headers"] = headers
    rec["msg"] = msg
    return rec


def artifact(size: int) -> bytes:
    """About ``size`` bytes of JSON Lines, the same for the same size."""
    rng = random.Random(SEED)
    lines: list[bytes] = []
    total = i = 0
    while total < size:
        line = json.dumps(record(rng, i), separators=(",", ":")).encode()
        lines.append(line)
        total += len(line) + 1
        i += 1
    return b"\n".join(lines) + b"\n"


def rate(data: bytes, call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return len(data) / (time.perf_counter() - began) / 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser(__doc__, quick="an 8 MiB artifact instead of 64 MiB", reps="interleaved repetitions")
    args = parser.parse_args(argv)
    size = (8 if args.quick else 64) * MiB
    reps = max(1, args.reps) if args.reps is not None else 3
    began = time.perf_counter()
    print(command_line("redaction.py", argv))
    print(machine())
    data = artifact(size)
    outcomes: dict[str, RedactionOutcome] = {}

    def redactor(name: str) -> Callable[[int], float]:
        def run(_: int) -> float:
            def call() -> None:
                outcomes[name] = redact_bytes(data, media_type=MEDIA_TYPE, redactor=name)

            return rate(data, call)

        return run

    names = ("pii.v1", "secrets.v1")
    contenders = [redactor(name) for name in names] + [lambda _: rate(data, lambda: BASELINE.sub(b"[EMAIL]", data))]
    samples = interleave(reps, contenders)
    base = statistics.median(samples[-1])
    lines = data.count(b"\n")
    print(f"artifact: {len(data) / MiB:.1f} MiB, {lines:,} JSON Lines records; {reps} interleaved repetitions")
    print(f"  {'re.sub, one e-mail regex (baseline)':40} {base:8.1f} MB/s")
    for name, rates in zip(names, samples, strict=False):
        ours = statistics.median(rates)
        outcome = outcomes[name]
        assert outcome.records_in == lines
        assert outcome.data.count(b"\n") == lines
        found = ", ".join(f"{kind} {count:,}" for kind, count in sorted(outcome.matches.items()))
        print(f"  {'redact_bytes ' + name:40} {ours:8.1f} MB/s  {ours / base:.2f}x the baseline  ({found})")
    print(total_time(began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
