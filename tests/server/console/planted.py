"""A store planted for the console's tests: every kind of view, hostile names and payloads, a sealed canary,
a policy-denied artifact, another tenant's and another user's artifacts, and a run with tool calls.

:func:`plant` fills an open vault and returns the ids by role. Every payload that a browser could run is in
:data:`XSS`; a page that shows them must show them as text and run none of them.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

from refvault import Scope, Toolbox, Vault
from refvault.policy import Policy, Rule
from refvault.toolbox import Ref

OWNER = Scope("acme", "ana", "s1")
OTHER_SESSION = Scope("acme", "ana", "s2")
OTHER_USER = Scope("acme", "bob", "s1")
FOREIGN = Scope("globex", "ana", "s1")
RUN = Scope("acme", "ana", "run-1")

CANARY = "CANARY-sealed-7f3a9c1e"  # in the sealed artifact only; never in any page or response
SCRIPT = "<script>window.__pwned=1;alert('text')</script>"
IMG = "<img src=x onerror=\"window.__pwned=1;alert('img')\">"
PARAM_IMG = "<img src=x onerror=alert(document.domain)>"  # no ';' (it separates media-type parameters)
XSS = (SCRIPT, IMG, PARAM_IMG)
SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=1;alert(\'svg\')">'
    b"<script>window.__pwned=1;alert('svg2')</script><circle r='40'/></svg>"
)
HTML = b"<!doctype html><h1>hi</h1><script>window.__pwned=1;alert('html')</script>"
RECORDS = 60  # records of the record artifact: more than one page of the table


@dataclass
class Planted:
    ids: dict[str, str] = field(default_factory=dict)
    image: bytes = b""


def png(width: int = 120, height: int = 80) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def plant(vault: Vault) -> Planted:
    planted = Planted(image=png())
    ids = planted.ids

    def put(name: str, scope: Scope, data: bytes, media_type: str, **options: object) -> None:
        ids[name] = vault.put(scope, data, media_type=media_type, **options).artifact_id  # type: ignore[arg-type]

    text = "\n".join([f"line {n}" for n in range(1, 451)] + [SCRIPT, IMG]).encode()
    put("text", OWNER, text, "text/plain", filename=f"notes{IMG}.txt", labels={"ops"})
    put("json", OWNER, json.dumps({SCRIPT: {"value": IMG, "n": [1, 2, {"deep": True}]}}).encode(), "application/json")
    rows = [
        {"i": i, "severity": "high" if i % 2 else "low", "note": IMG if i == 3 else f"r{i}"} for i in range(RECORDS)
    ]
    put("records", OWNER, "\n".join(json.dumps(r) for r in rows).encode(), "application/x-ndjson")
    put("image", OWNER, planted.image, "image/png", filename="chart.png")
    put("svg", OWNER, SVG, "image/svg+xml", filename="logo.svg")
    put("html", OWNER, HTML, "text/html", filename="page.html")
    put("binary", OWNER, bytes(range(256)) * 8, "application/octet-stream")
    put("odd_type", OWNER, b"plain words", f'text/plain; charset="utf-8"; x="{PARAM_IMG}"')
    put("sealed", OWNER, f"runbook step: {CANARY}\n".encode(), "text/plain", disclosure="sealed", filename="runbook")
    put("denied", OWNER, b"secret numbers", "text/plain", labels={"secret"})
    put("other_session", OTHER_SESSION, b"from s2", "text/plain", labels={"pii"})
    put("other_user", OTHER_USER, b"bob's", "text/plain")
    put("foreign", FOREIGN, b"globex's", "text/plain")
    vault.set_policy(
        "acme", Policy(rules=(Rule(id="no-secret-to-people", labels=frozenset({"secret"}), recipients=("user",)),))
    )

    toolbox = Toolbox(vault, audit_calls=True)

    @toolbox.tool
    def shout(source: Ref) -> bytes:
        """Upper-case an artifact."""
        return source.read().upper()

    ids["run_input"] = vault.put(RUN, b"input rows\n", media_type="text/plain").artifact_id
    result = toolbox.call_sync("shout", {"source": ids["run_input"]}, scope=RUN, run_id="run-1")
    ids["run_output"] = result.artifacts[0]["artifact_id"]
    vault.flush_audit()
    return planted
