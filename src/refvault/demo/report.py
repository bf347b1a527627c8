"""The demo's output: a rich transcript of the six steps, an evidence report, and the same as one JSON document.

The transcript shows, per step, what the harness did, what the user asked, each tool call with its id and
arguments, a bounded view of what the model got back, the model's answers, any request the guard stopped,
and the step's check. Everything printed comes from the run's records: ids, digests, counts, coverage and the
model's own view (which never held the runbook or the screenshot's bytes).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from refvault.cli.console import descriptor_json, make_console, plural

if TYPE_CHECKING:
    from rich.console import Console

    from refvault.demo.transcript import Investigation, Step
    from refvault.model import Descriptor
    from refvault.scripted import CallRecord, Turn

__all__ = ["demo_json", "print_report"]

ROLES = {
    "incident-eu-west.jsonl": "incident snapshot",
    "restart-evidence.jsonl": "restart evidence",
    "runbook-checkout-restart.md": "runbook (sealed)",
}
SHOWN_CHARS = 240  # of a tool result the transcript shows when it has no dedicated view


# -- JSON -------------------------------------------------------------------------------------------------------------


def demo_json(found: Investigation, store: str | None) -> dict[str, Any]:
    """The run as one JSON-ready document, its keys in a fixed order."""
    from refvault.demo.incident import DECISION_AT, SOURCE_ID, iso
    from refvault.demo.scenario import CONCLUDED_AT, RUN_ID, SCOPE

    return {
        "ok": found.ok,
        "store": store,
        "store_kept": store is not None,
        "scenario": {
            "incident": "INC-2026-1106",
            "scope": {"tenant": SCOPE.tenant, "user": SCOPE.user, "session": SCOPE.session},
            "run_id": RUN_ID,
            "source_id": SOURCE_ID,
            "concluded_at": iso(CONCLUDED_AT),
            "decision_at": iso(DECISION_AT),
            "model": "scripted decisions; real runtime",
        },
        "steps": [step.to_dict() for step in found.steps],
        "evidence": {
            "artifacts": [{"role": _role(d), "descriptor": descriptor_json(d)} for d in found.artifacts],
            "conclusions": [conclusion.to_dict() for conclusion in found.conclusions],
        },
        "guard": {"stats": found.guard, "events": found.guard_events},
        "model_requests": [
            {
                "index": index,
                "messages": request["messages"],
                "tools": [tool["function"]["name"] for tool in request.get("tools", ())],
            }
            for index, request in enumerate(found.requests)
        ],
    }


def _role(descriptor: Descriptor) -> str:
    if descriptor.media_type == "image/png":
        return "dashboard screenshot"
    return ROLES.get(descriptor.filename or "", "artifact")


# -- the transcript ---------------------------------------------------------------------------------------------------


def print_report(found: Investigation, store: str | None) -> None:
    """Print the transcript, then the evidence report, then the verdict line."""
    from rich.text import Text

    from refvault.demo.scenario import RUN_ID, SCOPE

    console = make_console(soft_wrap=False)
    console.print(
        Text.assemble(
            ("refvault demo", "bold"),
            " · incident INC-2026-1106: checkout errors in eu-west, replayed (source times are 2026-11-06 UTC)",
        )
    )
    console.print(
        Text(
            f"scope {SCOPE.tenant} / {SCOPE.user} / {SCOPE.session} · run {RUN_ID} · the model's decisions are "
            "scripted; the Toolbox, vault, reads, MCP gateway, guard and evidence gate are real",
            style="dim",
        )
    )
    for step in found.steps:
        _print_step(console, step)
    _print_evidence(console, found)
    passed = sum(step.check.ok for step in found.steps)
    where = f"store kept at {store}" if store is not None else "temporary store removed"
    if found.ok:
        console.print(Text(f"demo passed: all {passed} step checks hold ({where})", style="bold green"))
    else:
        failed = [str(step.number) for step in found.steps if not step.check.ok]
        which = f"step {failed[0]}" if len(failed) == 1 else f"steps {', '.join(failed)}"
        console.print(Text(f"demo FAILED: {which} did not hold ({where})", style="bold red"))


def _print_step(console: Console, step: Step) -> None:
    from rich.rule import Rule
    from rich.text import Text

    mark, style = ("✔", "green") if step.check.ok else ("✘", "bold red")
    console.print()
    console.print(Rule(Text(f" {mark} Step {step.number} · {step.name}: {step.title} ", style=style), align="left"))
    for kind, entry in step.entries:
        if kind == "turn":
            _print_turn(console, entry)
        else:
            _line(console, kind, entry, "cyan" if kind == "user" else "dim")
    label = "check ✔" if step.check.ok else "check ✘"
    _line(console, label, step.check.detail, "green" if step.check.ok else "bold red")


def _print_turn(console: Console, turn: Turn) -> None:
    if turn.blocked:
        sites = "; ".join(
            f"{finding.get('artifact_id') or 'oversized payload'} at {finding.get('site')} "
            f"({finding.get('arm')} arm, {finding.get('matched'):,} bytes matched)"
            for finding in turn.blocked
        )
        _line(console, "guard", f"✋ request blocked before it reached the model (ContextLeak): {sites}", "bold yellow")
        return
    if turn.reply is None:
        return
    if turn.reply.content and turn.reply.tool_calls:
        _line(console, "model", turn.reply.content, "bold")
    for record in turn.calls:
        arguments = json.dumps(dict(record.call.arguments), ensure_ascii=False)
        via = "" if record.via == "toolbox" else f" via {record.via} gateway"
        _line(console, "model", f"→ {record.call.name} [{record.call.id}]{via} {arguments}", "magenta")
        _line(console, "saw", f"← [{record.call.id}] {_view(record)}", "")
    if turn.reply.content and not turn.reply.tool_calls:
        _line(console, "model", turn.reply.content, "bold")


LABEL = 10  # characters of the label column


def _line(console: Console, label: str, text: str, style: str) -> None:
    """``label`` right-aligned in its column, then ``text`` wrapped with a hanging indent (no trailing spaces)."""
    from rich.text import Text

    width = max(console.width - LABEL - 1, 20)
    lines = Text(text, style=style).wrap(console, width, overflow="fold")
    head_style = "dim" if label in ("saw", "harness", "") else style
    for index, line in enumerate(lines):
        line.rstrip()
        head = Text(f"{label:>{LABEL}} " if index == 0 else " " * (LABEL + 1), style=head_style)
        console.print(Text.assemble(head, line), soft_wrap=True)


def _view(record: CallRecord) -> str:
    """A bounded, readable view of what the model got back from one call."""
    content = record.content
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    size = f"({plural(len(content), 'character')} in all)"
    if record.withheld:
        return (
            "(withheld: the guard stopped the next request because this result carried protected content; "
            "the harness replaced it with a note naming the artifact, so the model never saw it)"
        )
    if not isinstance(value, dict):
        return _cut(content) + ("" if len(content) <= SHOWN_CHARS else f" {size}")
    if "preview" in value and "capture" in value:
        capture, source, shown = value["capture"], value["source_version"], value["preview"]
        omissions = _omissions(capture.get("omissions", []))
        return (
            f"{value['artifact_id']} · source {source.get('source_id')} snapshot {source.get('snapshot_id')} "
            f"observed {source.get('observed_at')} · "
            f"capture {capture.get('status')}, {capture.get('records', 0):,} records · coverage "
            f"{_coverage(capture.get('coverage', {}))} · omissions: {omissions} · preview covers "
            f"{shown.get('covers')} · read more: query_artifact {size}"
        )
    if "scan_complete" in value:
        scan = "complete" if value["scan_complete"] else "INCOMPLETE"
        rows = ", ".join(str(row["record"].get("event_id", row["index"])) for row in value.get("records", []))
        return (
            f"{value['artifact_id']} ({value['content_hash'][:19]}…, snapshot {value.get('source_snapshot_id')}) · "
            f"{value['returned_records']} of {value['total_records']:,} records returned · scanned "
            f"{value['scanned_records']:,}, scan {scan} · capture {value['capture_status']} · omissions: "
            f"{_omissions(value.get('omissions', []))}" + (f" · records: {rows}" if rows else "")
        )
    if "content" in value and isinstance(value["content"], list):  # an MCP result, as the gateway projected it
        parts = []
        for block in value["content"]:
            if block.get("type") == "resource_link":
                meta = block.get("_meta", {})
                parts.append(
                    f"resource_link {block.get('uri')} ({block.get('mimeType')}, {block.get('size'):,} bytes, "
                    f"{meta.get('disclosure')}, sha256 {str(meta.get('sha256'))[:12]}…)"
                )
            elif block.get("type") == "text":
                parts.append(f"text {block.get('text')!r}")
            else:
                parts.append(f"{block.get('type')} block")
        return " · ".join(parts) + f" {size}"
    if "verdict" in value:
        verdict = value["verdict"]
        codes = ", ".join(reason["code"] for reason in verdict["reasons"]) or "none"
        return f"{value.get('status')}: {value.get('action')} · gate satisfied: {verdict['satisfied']} · {codes}"
    return _cut(content)


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _coverage(coverage: dict[str, Any]) -> str:
    region = coverage.get("region")
    regions = ", ".join(region) if isinstance(region, list) else str(region)
    return f"region {regions}, {coverage.get('start_inclusive')} to {coverage.get('end_exclusive')}"


def _omissions(omissions: list[Any]) -> str:
    if not omissions:
        return "none"
    return "; ".join(
        f"{o.get('region', '?')} ({o.get('reason', 'no reason given')})" if isinstance(o, dict) else str(o)
        for o in omissions
    )


# -- the evidence report ----------------------------------------------------------------------------------------------


def _print_evidence(console: Console, found: Investigation) -> None:
    from rich.rule import Rule
    from rich.text import Text

    console.print()
    console.print(Rule(Text(" Evidence report ", style="bold"), align="left"))
    console.print(Text("Artifacts (immutable; each read is verified against its content hash)", style="bold"))
    for descriptor in found.artifacts:
        source = descriptor.source_version
        completeness = descriptor.to_dict()["completeness"]
        _line(
            console,
            _role(descriptor).split(" (")[0].split(" ")[-1][:LABEL],
            f"{descriptor.artifact_id} · {descriptor.filename or '(no filename)'} · {descriptor.media_type} · "
            f"{descriptor.size:,} bytes · {descriptor.disclosure}",
            "bold",
        )
        _line(console, "", descriptor.content_hash, "")
        details = []
        if source.get("source_id"):
            details.append(f"source {source['source_id']}")
        if source.get("snapshot_id"):
            details.append(f"snapshot {source['snapshot_id']} observed {source.get('observed_at')}")
        details.append(f"capture {completeness.get('status')}")
        if "records" in completeness:
            details.append(f"{completeness['records']:,} records")
        if "coverage" in completeness:
            details.append(f"coverage {_coverage(completeness['coverage'])}")
        details.append(f"omissions: {_omissions(completeness.get('omissions', []))}")
        _line(console, "", " · ".join(details), "dim")
    allowed = [c for c in found.conclusions if c.allowed]
    refused = [c for c in found.conclusions if not c.allowed]
    console.print(Text("Conclusions the evidence gate allows", style="bold"))
    for conclusion in allowed:
        _line(console, "✔", f"{conclusion.claim} (step {conclusion.step})", "green")
    console.print(Text("Conclusions the evidence gate refuses", style="bold"))
    for conclusion in refused:
        _line(console, "✘", f"{conclusion.claim} (step {conclusion.step})", "yellow")
        for reason in conclusion.verdict["reasons"]:
            _line(console, "", f"{reason['code']}: {reason['message']}", "dim")
    if found.guard:
        stats = found.guard
        console.print(
            Text(
                f"Guard: protected {plural(stats.get('artifacts', 0), 'artifact')} "
                f"({plural(stats.get('protected_bytes', 0), 'byte')}, held as "
                f"{plural(stats.get('fingerprints', 0), 'fingerprint')}); "
                f"{plural(len(found.requests), 'request')} reached the model, "
                f"{plural(sum(len(e['findings']) > 0 for e in found.guard_events), 'request')} stopped",
                style="bold",
            )
        )
