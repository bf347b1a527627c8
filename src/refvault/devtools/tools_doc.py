"""Render ``docs/tools.md``: the model's read tools and the record query operators, from the code itself.

Run ``python -m refvault.devtools.tools_doc`` to write the page, or ``--check`` to compare it with what is
on disk (exit 1, naming the file, when they differ; ``make check`` runs it). Invariants
(``tests/devtools/test_tools_doc.py``):

* Tool names, descriptions, argument names, types, defaults and which arguments are required come from the
  JSON schemas the model sees (``Toolbox.schemas("mcp")``; every flavor carries the same), so a changed
  tool changes the page.
* Each argument's meaning and constraints are stated here, with every bound taken from the constant that
  enforces it (:mod:`refvault.limits`). An argument the schema has and this module does not describe, or a
  description of an argument the schema lacks, fails the render: the page cannot silently fall behind.
* The query operators are exactly those the selection checker accepts
  (:mod:`refvault.read.record_select`); an operator missing here, or described here but unknown to the
  checker, fails the render.
* Rendering is deterministic: the same code gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from refvault.limits import (
    CURSOR_TTL_SECONDS,
    DEFAULT_GREP_SECONDS,
    LOAD_IMAGE_BYTES,
    LOAD_TEXT_CHARS,
    MAX_CHARS,
    MAX_DEPTH,
    MAX_IN,
    MAX_LEAVES,
    MAX_LIMIT,
    MAX_LIST_SUMMARY,
    MAX_LOAD_IDS,
    MAX_MATCHES,
    MAX_ORDER,
    MAX_PATTERN,
)

__all__ = ["ARGUMENTS", "DOC_PATH", "EXAMPLE_QUERY", "OPERATORS", "main", "render"]

DOC_PATH = Path(__file__).resolve().parents[3] / "docs" / "tools.md"

_ID = "An artifact id (`art_` and 28 characters `a-z`, `2-7`), as a preview, listing or tool result gave it."
_SCOPED = "an id of the caller's scope (another scope's id is answered exactly like an unknown one)"

# (tool, argument) -> (what it means, its constraints). Every bound is the constant that enforces it.
ARGUMENTS: dict[tuple[str, str], tuple[str, str]] = {
    ("describe_artifact", "artifact_id"): (_ID, _SCOPED + "; sealed artifacts are described (metadata only)"),
    ("list_artifacts", "limit"): ("How many artifacts to show, newest first.", f"1 to {MAX_LIST_SUMMARY}"),
    ("read_artifact", "artifact_id"): (
        _ID,
        _SCOPED + "; a text artifact (`text/*`, JSON, XML, YAML, ...) that is not sealed",
    ),
    ("read_artifact", "lines"): (
        "A line window `[start, end)`: zero-based, end exclusive; end `null` reads to the end.",
        "two integers >= 0, end > start; not with `byte_range` or `pattern`",
    ),
    ("read_artifact", "byte_range"): (
        "A byte window `[offset, length]`; it never splits a UTF-8 character (the answer gives the actual range).",
        "offset >= 0, length >= 1; not with `lines` or `pattern`",
    ),
    ("read_artifact", "pattern"): (
        "Find the lines containing this text (or matching it, with `regex`) instead of reading a window.",
        f"1 to {MAX_PATTERN:,} characters; a literal pattern holds no newline; "
        f"a search stops after {DEFAULT_GREP_SECONDS:g} s and says where to go on",
    ),
    ("read_artifact", "regex"): (
        "Treat `pattern` as a regular expression (RE2 syntax: linear time, no backreferences).",
        "with `pattern` only",
    ),
    ("read_artifact", "max_chars"): (
        "The most characters a window returns; a cut window says so and gives the arguments of the next one.",
        f"1 to {MAX_CHARS:,}",
    ),
    ("read_artifact", "max_matches"): ("The most matching lines a search returns.", f"1 to {MAX_MATCHES:,}"),
    ("read_artifact", "from_line"): (
        "Search from this line (zero-based): how a search that stopped continues.",
        "an integer >= 0; with `pattern` only",
    ),
    ("query_artifact", "artifact_id"): (
        _ID,
        _SCOPED + "; a record artifact (JSON Lines, a JSON array of objects, CSV or Parquet) that is not sealed",
    ),
    ("query_artifact", "where"): (
        "A selector: a condition, or `and`/`or`/`not` of selectors (see the operators below). Omitted: every record.",
        f"at most {MAX_DEPTH} levels deep and {MAX_LEAVES} conditions; every field named must exist",
    ),
    ("query_artifact", "fields"): (
        "The fields each record returns. Omitted: every field.",
        "a non-empty list, no field twice, each a field of the artifact",
    ),
    ("query_artifact", "order"): (
        'Sort keys, `[{"field": f, "direction": "asc" or "desc"}]` (direction defaults to `asc`); nulls sort '
        "lowest and the record index breaks ties. Omitted: record order.",
        f"at most {MAX_ORDER} keys, no field twice, no field holding nested or mixed values",
    ),
    ("query_artifact", "limit"): ("Records per page.", f"an integer >= 1; larger values return at most {MAX_LIMIT:,}"),
    ("query_artifact", "record_range"): (
        "Only the records at positions `[start, end)` (zero-based) are considered.",
        "two integers, 0 <= start <= end; clipped to the record count",
    ),
    ("query_artifact", "cursor"): (
        "The `next_cursor` of the previous page, to continue where it stopped.",
        "only with the same `where`, `fields`, `order` and `record_range` (`limit` may change); "
        f"valid for {CURSOR_TTL_SECONDS // 3600} h, for the same caller and artifact",
    ),
    ("load_artifacts", "artifact_ids"): (
        f"The ids to load: text as text (the first {LOAD_TEXT_CHARS:,} characters; the answer says how to "
        f"continue with `read_artifact`), PNG, JPEG, GIF and WebP images of up to {LOAD_IMAGE_BYTES // 2**20} MiB "
        "as images.",
        f"1 to {MAX_LOAD_IDS} ids, not sealed; a failing id gets an error entry and the others still load",
    ),
}

# op -> (what it selects, the values it takes). Checked against the operators the query checker accepts.
OPERATORS: dict[str, tuple[str, str]] = {
    "eq": ("the field equals `value`", "a value of the field's kind"),
    "ne": ("the field differs from `value` (false when the field is null or missing)", "a value of the field's kind"),
    "lt": ("the field is less than `value`", "a value of the field's kind"),
    "lte": ("the field is less than or equal to `value`", "a value of the field's kind"),
    "gt": ("the field is greater than `value`", "a value of the field's kind"),
    "gte": ("the field is greater than or equal to `value`", "a value of the field's kind"),
    "in": ("the field equals one of the values", f"a list of 1 to {MAX_IN:,} values of the field's kind"),
    "contains": ("the text field contains `value` (case-sensitive substring)", "a string; text fields only"),
    "is_null": (
        "`value` true (the default): the field is null or missing; false: it is present",
        "optional `true` or `false`; the only op for fields holding nested or mixed values",
    ),
}

_KINDS = (
    "| field kind | column types (`describe_artifact` shows them) | values compared with it |\n"
    "| --- | --- | --- |\n"
    "| number | integer and floating types (`BIGINT`, `DOUBLE`, ...) | an integer or a finite number |\n"
    "| string | `VARCHAR` | a string |\n"
    "| bool | `BOOLEAN` | `true` or `false` |\n"
    "| date/time | `DATE`, `TIME`, `TIMESTAMP`, ... (typed Parquet columns: in JSON and CSV, dates stay strings) "
    '| an ISO 8601 string, e.g. `"2026-11-06T04:10:00"` |\n'
    "| other | nested or mixed values (`STRUCT`, lists, `JSON`) | none: only `is_null` applies |\n"
)

# A query_artifact call as the page shows it (tests/devtools/test_tools_doc.py runs it on matching records).
EXAMPLE_QUERY = """{"artifact_id": "art_…",
 "where": {"and": [{"field": "region", "op": "eq", "value": "eu-west"},
                   {"field": "severity", "op": "in", "value": ["critical", "error"]}]},
 "fields": ["event_id", "ts", "severity"], "order": [{"field": "ts", "direction": "desc"}], "limit": 100}"""


def _type(node: dict[str, Any]) -> str:
    """A JSON schema node in words: `integer`, `array of string`, `object or null`, ..."""
    options = node.get("anyOf")
    if options is not None:
        return " or ".join(_type(option) for option in options)
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        if items is None:
            return "array"
        inner = _type(items)
        return f"array of ({inner})" if " or " in inner else f"array of {inner}"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"object of {_type(values)} values"
        return "object"
    if not isinstance(kind, str):
        raise ValueError(f"a schema node without a type cannot be rendered: {node!r}")
    return kind


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _tool_section(schema: dict[str, Any]) -> list[str]:
    name = schema["name"]
    parameters = schema["inputSchema"]
    required = set(parameters.get("required", ()))
    description = " ".join(line.strip() for line in schema["description"].splitlines())
    out = [f"## `{name}`", "", description, ""]
    out += ["| argument | type | default | meaning | constraints |", "| --- | --- | --- | --- | --- |"]
    for argument, node in parameters.get("properties", {}).items():
        meaning, constraints = ARGUMENTS[(name, argument)]
        default = "required" if argument in required else f"`{json.dumps(node.get('default'))}`"
        out.append(f"| `{argument}` | {_cell(_type(node))} | {default} | {_cell(meaning)} | {_cell(constraints)} |")
    return [*out, ""]


def _schemas() -> list[dict[str, Any]]:
    from refvault.toolbox import Toolbox
    from refvault.vault import Vault

    with Vault.open("memory://") as vault:
        return Toolbox(vault).schemas("mcp")


def _check_coverage(schemas: list[dict[str, Any]]) -> None:
    from refvault.read.record_select import _OPS

    present = {(s["name"], argument) for s in schemas for argument in s["inputSchema"].get("properties", {})}
    if present != set(ARGUMENTS):
        missing = sorted(present - set(ARGUMENTS))
        stale = sorted(set(ARGUMENTS) - present)
        raise ValueError(f"tools_doc.ARGUMENTS is out of date: undescribed {missing}, no longer in a schema {stale}")
    if tuple(OPERATORS) != tuple(_OPS):
        raise ValueError(f"tools_doc.OPERATORS {list(OPERATORS)} differ from the query checker's {list(_OPS)}")


def render() -> str:
    """The text of ``docs/tools.md``."""
    schemas = _schemas()
    _check_coverage(schemas)
    names = ", ".join(f"[`{s['name']}`](#{s['name']})" for s in schemas)
    out = [
        "# The model's read tools",
        "",
        "<!-- Generated by `python -m refvault.devtools.tools_doc` from the schemas the model sees; do not edit. -->",
        "",
        f"Every `Toolbox` registers these tools unless it is created with `read_tools=False`: {names}. "
        "The framework adapters, `refvault mcp serve`, `refvault mcp proxy` and `refvault serve`'s `/mcp` serve "
        "the same tools with the same schemas. Types and defaults below are those of the JSON schema the model "
        'is given (`box.schemas("openai")`, `"anthropic"`, `"gemini"` or `"mcp"`); the constraints are checked '
        "when the tool runs, and a call that breaks one gets an error message saying what is allowed, never "
        "content. Every answer says what it covers (`capture_status`, `omissions`, and for queries "
        "`scan_complete` and `scanned_records`) and how to continue. The defaults and limits shown are those of "
        "a Toolbox given no model size; one given `model_context_tokens` scales `max_chars`, `max_matches`, "
        "`limit` and the characters `load_artifacts` shows to that model, and caps a larger value the model asks "
        "for, saying so in `capped` ([python.md](python.md#caps-scaled-to-the-model)).",
        "",
    ]
    for schema in schemas:
        out += _tool_section(schema)
    out += [
        "## Query operators",
        "",
        "`where` is a condition or a combination of them:",
        "",
        '- a condition: `{"field": f, "op": op, "value": v}`;',
        '- `{"and": [s, ...]}` and `{"or": [s, ...]}`: a non-empty list of selectors;',
        '- `{"not": s}`: the selector `s` does not hold.',
        "",
        f"At most {MAX_DEPTH} levels deep and {MAX_LEAVES} conditions. Every comparison is false when the field "
        'is null or missing (`is_null` excepted), so `{"not": ...}` means what it says. The query compiles to '
        "parameterised SQL: values are never spliced into it.",
        "",
        "| op | selects records where | value |",
        "| --- | --- | --- |",
    ]
    out += [f"| `{op}` | {_cell(selects)} | {_cell(value)} |" for op, (selects, value) in OPERATORS.items()]
    out += [
        "",
        "A value must suit the kind of the field it is compared with:",
        "",
        _KINDS,
        "A `query_artifact` call:",
        "",
        "```json",
        EXAMPLE_QUERY,
        "```",
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``docs/tools.md`` (or ``--output``); with ``--check``, exit 1 if the file differs from the render."""
    parser = argparse.ArgumentParser(prog="python -m refvault.devtools.tools_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="the page (default: docs/tools.md)")
    options = parser.parse_args(argv)
    text = render()
    if options.check:
        current = options.output.read_text(encoding="utf-8") if options.output.exists() else None
        if current != text:
            state = "is missing" if current is None else "is out of date"
            print(
                f"{options.output} {state}: run `python -m refvault.devtools.tools_doc` to regenerate it",
                file=sys.stderr,
            )
            return 1
        print(f"{options.output} is up to date")
        return 0
    options.output.write_text(text, encoding="utf-8")
    print(f"wrote {options.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
