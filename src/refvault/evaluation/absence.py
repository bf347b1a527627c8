"""False absence conclusions and omission reporting.

The scripted model draws an absence conclusion ("there is none") from an
answer only when it has zero matches, says its scan was complete, and
reports no omissions. An answer that withholds that (an incomplete scan, a
capture with omissions) only allows a qualified answer. A conclusion is
*false* when matches exist where it claims there are none: in the records a
budget left unscanned, or in the coverage a partial capture omitted (the eval
generated both, so it knows). Controls check the other way round: a complete
scan of a complete capture, and a complete scan of an explicit record range,
must allow the (true) conclusion.

Omissions: of the responses about a partial capture (and of a query a budget
cut short), how many carried the omission.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from refvault import read
from refvault.evaluation.tools import call_tool, make_toolbox
from refvault.evaluation.world import OTHER_REGION, REGION, World, jsonl, log_lines
from refvault.toolbox.toolbox import Toolbox

__all__ = ["claims_absence", "run"]

ABSENCE = "absence"
OMISSIONS = "omissions"
CRITICAL = {"field": "severity", "op": "eq", "value": "critical"}
NEWEST_FIRST = [{"field": "ts", "direction": "desc"}]
COUNT = 1500
CUT = 1000  # the scan budget; every critical event of the "late" capture lies beyond it


def claims_absence(answer: Mapping[str, Any]) -> bool:
    """Whether an answer supports "none exist": zero matches, a complete scan, and no omissions."""
    matches = answer.get("returned_records", answer.get("returned"))
    return matches == 0 and answer.get("scan_complete") is True and not answer.get("omissions")


async def run(world: World) -> None:
    rng = world.rng
    late = frozenset(rng.sample(range(CUT + 100, COUNT), 6))
    partition = {"region": OTHER_REGION, "reason": "collector partition: region not collected"}
    start, end = world.window()
    partition |= {"start_inclusive": start, "end_exclusive": end}
    held_back = world.incident_records(400, region=OTHER_REGION, critical=frozenset(rng.sample(range(400), 7)))
    truth_omitted = sum(r["severity"] == "critical" for r in held_back)

    quiet = world.capture(jsonl(world.incident_records(COUNT)), filename="quiet.jsonl")
    late_records = world.capture(jsonl(world.incident_records(COUNT, critical=late)), filename="late.jsonl")
    late_text = world.capture(log_lines(world.incident_records(COUNT, critical=late)), media_type="text/plain")
    partial_events = world.incident_records(COUNT)
    partial = world.capture(
        jsonl(partial_events),
        filename="partial.jsonl",
        status="partial",
        regions=(REGION, OTHER_REGION),
        omissions=(partition,),
    )
    partial_text = world.capture(
        log_lines(partial_events),
        media_type="text/plain",
        filename="partial.log",
        status="partial",
        regions=(REGION, OTHER_REGION),
        omissions=(partition,),
    )
    vault, owner = world.vault, world.owner
    box = make_toolbox(world, "summarize")

    def query(artifact_id: str, **options: Any) -> Callable[[], dict[str, Any]]:
        return lambda: read.query(vault, owner, artifact_id, where=CRITICAL, **options)

    # (name, the read, matches that exist where an absence conclusion would claim none, is it a control)
    probes: list[tuple[str, Callable[[], dict[str, Any]], int, bool]] = [
        ("complete capture, complete scan, none exist (control)", query(quiet.artifact_id), 0, True),
        (
            "complete scan of an explicit record range, none in it (control)",
            query(late_records.artifact_id, record_range=[0, CUT]),
            0,
            True,
        ),
        ("scan cut by max_scan", query(late_records.artifact_id, max_scan=CUT), len(late), False),
        (
            "ordered scan cut by max_scan",
            query(late_records.artifact_id, max_scan=CUT, order=NEWEST_FIRST),
            len(late),
            False,
        ),
        ("query stopped by its time budget", query(late_records.artifact_id, max_seconds=0), len(late), False),
        (
            "grep stopped by its time budget",
            lambda: read.grep(vault, owner, late_text.artifact_id, "CRITICAL", max_seconds=0),
            len(late),
            False,
        ),
        ("partial capture (region omitted): query", query(partial.artifact_id), truth_omitted, False),
        (
            "partial capture (region omitted): ordered query",
            query(partial.artifact_id, order=NEWEST_FIRST),
            truth_omitted,
            False,
        ),
        (
            "partial capture (region omitted): grep",
            lambda: read.grep(vault, owner, partial_text.artifact_id, "CRITICAL"),
            truth_omitted,
            False,
        ),
    ]
    for name, call, hidden, control in probes:
        op = "grep" if "grep" in name else "query"
        with world.attempt(ABSENCE, "read", name, control=control) as a:
            _conclude(a, world.read(op, call), hidden, control)
    tool_probes: list[tuple[str, str, dict[str, Any]]] = [
        (
            "partial capture: query_artifact tool",
            "query_artifact",
            {"artifact_id": partial.artifact_id, "where": CRITICAL},
        ),
        (
            "partial capture: read_artifact tool (pattern)",
            "read_artifact",
            {"artifact_id": partial_text.artifact_id, "pattern": "CRITICAL"},
        ),
    ]
    for name, tool, arguments in tool_probes:
        with world.attempt(ABSENCE, "tool", name) as a:
            _conclude(a, await _tool_answer(world, box, tool, arguments), truth_omitted, False)

    await _omissions(world, box, partial.artifact_id, partial_text.artifact_id, partition, late_records.artifact_id)


def _conclude(attempt: Any, answer: Mapping[str, Any], hidden: int, control: bool) -> None:
    attempt.concluded = claims_absence(answer)
    attempt.false_absence = attempt.concluded and hidden > 0
    if attempt.concluded:
        attempt.outcome = "FALSE absence claimed" if attempt.false_absence else "absence concluded (true)"
    else:
        why = "scan incomplete" if answer.get("scan_complete") is not True else "omissions reported"
        matches = answer.get("returned_records", answer.get("returned"))
        attempt.outcome = f"withheld: {why}" if matches == 0 else f"{matches} matches"
    attempt.ok = attempt.concluded == control and not attempt.false_absence


async def _tool_answer(world: World, box: Toolbox, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    observation = await call_tool(
        world, box, tool, arguments, scope=world.owner, run_id=f"run_absence_{world.trial}", call_id=f"call_{tool}"
    )
    answer = json.loads(observation.content)
    return answer if isinstance(answer, dict) else {}


async def _omissions(
    world: World, box: Toolbox, records: str, text: str, omission: dict[str, Any], budgeted: str
) -> None:
    vault, owner = world.vault, world.owner

    def carries(value: object) -> bool:
        return omission in _omission_lists(value)

    direct: list[tuple[str, str, Callable[[], object]]] = [
        ("describe", "descriptor of a partial capture", lambda: vault.describe(owner, records).to_dict()),
        ("query", "query of a partial capture", lambda: read.query(vault, owner, records, where=CRITICAL)),
        (
            "query",
            "ordered query of a partial capture",
            lambda: read.query(vault, owner, records, where=CRITICAL, order=NEWEST_FIRST),
        ),
        ("window", "text window of a partial capture", lambda: read.window(vault, owner, text, lines=[0, 20])),
        ("grep", "grep of a partial capture", lambda: read.grep(vault, owner, text, "CRITICAL")),
    ]
    for op, name, call in direct:
        with world.attempt(OMISSIONS, "read", name) as a:
            a.ok = carries(world.read(op, call, model_facing=op != "describe"))
            a.outcome = "omission carried" if a.ok else "omission missing"
    tools: list[tuple[str, str, dict[str, Any]]] = [
        ("describe_artifact", "describe_artifact tool", {"artifact_id": records}),
        ("query_artifact", "query_artifact tool", {"artifact_id": records, "where": CRITICAL}),
        ("read_artifact", "read_artifact tool (window)", {"artifact_id": text, "lines": [0, 20]}),
        ("read_artifact", "read_artifact tool (pattern)", {"artifact_id": text, "pattern": "CRITICAL"}),
        ("load_artifacts", "load_artifacts tool", {"artifact_ids": [text]}),
    ]
    for tool, name, arguments in tools:
        with world.attempt(OMISSIONS, "tool", f"{name} on a partial capture") as a:
            observation = await call_tool(
                world, box, tool, arguments, scope=owner, run_id=f"run_omissions_{world.trial}", call_id=f"call_{tool}"
            )
            shown = [json.loads(observation.content)] + [
                part.get("text", "") for part in observation.parts if part.get("type") == "text"
            ]
            a.ok = carries(shown)
            a.outcome = "omission carried" if a.ok else "omission missing"
    with world.attempt(OMISSIONS, "read", "query cut by max_scan names the records it did not scan") as a:
        answer = world.read("query", lambda: read.query(vault, owner, budgeted, where=CRITICAL, max_scan=CUT))
        unscanned = [o for o in answer.get("omissions", ()) if isinstance(o, dict) and "record_range" in o]
        a.ok = bool(unscanned) and unscanned[0]["record_range"][0] == CUT
        a.outcome = "unscanned range carried" if a.ok else "unscanned range missing"


def _omission_lists(value: object) -> list[object]:
    """Every entry of every ``omissions`` list anywhere in ``value`` (nested dicts and lists, JSON strings parsed)."""
    found: list[object] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and item.startswith("{"):
            with contextlib.suppress(ValueError):
                stack.append(json.loads(item))
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if key == "omissions" and isinstance(inner, list):
                    found.extend(inner)
                else:
                    stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found
