"""What the artifact page shows of an artifact's bytes, chosen by its media type; every read goes through the vault.

Each builder takes the vault, the viewer's scope and the descriptor, and returns plain data a template renders
(escaped). The bytes are read with the vault's own selective reads (recipient ``user``), so each view is
scoped, verified and recorded in the disclosure ledger like any other read:

* **text** (``text/*``, ``+xml``, SVG and HTML as source): a line window with line numbers (:func:`text_view`);
* **JSON**: a collapsible tree of ``<details>`` (:func:`json_view`), at most :data:`JSON_MAX_BYTES` and
  :data:`JSON_MAX_NODES`, else the text view;
* **records** (JSON Lines, CSV, TSV, Parquet): a table from a record query with its cursor (:func:`records_view`);
* **images** a browser only displays (PNG, JPEG, GIF, WebP): a thumbnail made here with Pillow
  (:func:`thumbnail_png`), the full image behind it;
* **anything else**: the first :data:`HEX_BYTES` as hex (:func:`hex_view`), and a download through a capability link.

Sealed artifacts get none of these (:func:`view_kind` is ``"sealed"``): their page is metadata only.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

from refvault.model import RECORD_MEDIA_TYPES, Descriptor, Scope, base_type, is_text
from refvault.read import query, window
from refvault.vault.core import Vault

__all__ = [
    "HEX_BYTES",
    "IMAGE_MAX_BYTES",
    "IMAGE_TYPES",
    "JSON_MAX_BYTES",
    "JSON_MAX_NODES",
    "JsonNode",
    "hex_view",
    "json_view",
    "records_view",
    "text_view",
    "thumbnail_png",
    "view_kind",
]

HEX_BYTES = 4096
JSON_MAX_BYTES = 512 * 1024
JSON_MAX_NODES = 2000
IMAGE_MAX_BYTES = 32 * 1024 * 1024
IMAGE_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WEBP"}
"""The image types shown as thumbnails, and the one Pillow decoder each may use (no other format is decoded)."""
IMAGE_TYPES = frozenset(IMAGE_FORMATS)
IMAGE_MAX_PIXELS = 40_000_000  # a larger image (a decompression bomb, say) gets no thumbnail; nothing is decoded
WHERE_MAX = 8192  # characters of a query typed in the record table's box
THUMBNAIL_SIZE = (640, 640)
TEXT_LINES = 200
TEXT_CHARS = 40_000
RECORD_PAGE = 25


def view_kind(descriptor: Descriptor) -> str:
    """``sealed``, ``image``, ``records``, ``json``, ``text`` or ``hex``: how the artifact page shows the bytes."""
    if descriptor.disclosure == "sealed":
        return "sealed"
    kind = base_type(descriptor.media_type)
    if kind in IMAGE_TYPES:
        return "image"
    if kind == "application/json" or kind.endswith("+json"):
        return "json"
    if kind in RECORD_MEDIA_TYPES:
        return "records"
    if is_text(kind) or kind == "image/svg+xml":
        return "text"
    return "hex"


def text_view(vault: Vault, scope: Scope, descriptor: Descriptor, line: int) -> dict[str, Any]:
    """Lines ``[line, line + TEXT_LINES)`` numbered from 1, and where the previous and next windows start."""
    result = window(vault, scope, descriptor.artifact_id, lines=[line, line + TEXT_LINES], max_chars=TEXT_CHARS)
    text = str(result["text"])
    start = int(result["start"])
    if result["unit"] == "lines":
        rows = list(enumerate(text.split("\n")[: max(int(result["returned"]), 1)], start=start + 1))
    else:  # one long line, shown from its head
        rows = [(start + 1, text)]
    nxt = result.get("next") or None
    following = nxt["lines"][0] if nxt and "lines" in nxt else None
    return {
        "rows": rows,
        "start": start,
        "end": int(result["end"]),
        "total": int(result["total"]),
        "unit": result["unit"],
        "previous": max(start - TEXT_LINES, 0) if start > 0 else None,
        "next": following,
        "truncated": bool(result["truncated"]),
    }


@dataclass(slots=True)
class JsonNode:
    """One node of the JSON tree: its key (or index), its kind, a scalar's text, an object's or array's children."""

    key: str | None
    kind: str
    text: str = ""
    children: list[JsonNode] = field(default_factory=list)
    size: int = 0  # members of an object or array
    omitted: int = 0  # children not shown (the tree's node cap)


def json_view(vault: Vault, scope: Scope, descriptor: Descriptor) -> JsonNode | None:
    """The document as a tree, or None when it is too large or not valid JSON (the page shows text instead)."""
    if descriptor.size > JSON_MAX_BYTES:
        return None
    data = vault.read_bytes(scope, descriptor.artifact_id)
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    budget = [JSON_MAX_NODES]
    return _node(None, document, budget, 0)


def _node(key: str | None, value: Any, budget: list[int], depth: int) -> JsonNode:
    budget[0] -= 1
    if isinstance(value, dict | list):
        items = list(value.items()) if isinstance(value, dict) else [(f"[{i}]", v) for i, v in enumerate(value)]
        node = JsonNode(key, "object" if isinstance(value, dict) else "array", size=len(items))
        for index, (name, child) in enumerate(items):
            if budget[0] <= 0 or depth >= 64:
                node.omitted = len(items) - index
                break
            node.children.append(_node(str(name), child, budget, depth + 1))
        return node
    if isinstance(value, str):
        return JsonNode(key, "string", json.dumps(value, ensure_ascii=False))
    if value is None or isinstance(value, bool):
        return JsonNode(key, "literal", json.dumps(value))
    return JsonNode(key, "number", json.dumps(value))


def records_view(
    vault: Vault, scope: Scope, descriptor: Descriptor, *, where: str, cursor: str | None
) -> dict[str, Any]:
    """A page of records (:data:`RECORD_PAGE`) matching ``where`` (a JSON selector; empty: all), and its columns.

    Raises :class:`~refvault.errors.InvalidArgument` (or a subclass) for a malformed selector or cursor.
    """
    from refvault.errors import InvalidArgument

    selector: object = None
    if len(where) > WHERE_MAX:
        raise InvalidArgument(f"the query is longer than {WHERE_MAX} characters")
    if where.strip():
        try:
            selector = json.loads(where)
        except (ValueError, RecursionError):
            raise InvalidArgument(
                'the query must be a JSON selector, e.g. {"field": "status", "op": "eq", "value": "open"}'
            ) from None
    result = query(vault, scope, descriptor.artifact_id, where=selector, limit=RECORD_PAGE, cursor=cursor)
    records = [(int(item["index"]), item["record"]) for item in result["records"]]
    columns: list[str] = []
    for _, record in records:
        for name in record if isinstance(record, dict) else ():
            if name not in columns:
                columns.append(str(name))
    rows = [
        (index, [_cell(record.get(name)) if isinstance(record, dict) else "" for name in columns])
        for index, record in records
    ]
    return {
        "columns": columns,
        "rows": rows,
        "next_cursor": result.get("next_cursor"),
        "total": result.get("total_records"),
        "scanned": result.get("scanned_records"),
        "complete": result.get("scan_complete"),
        "stopped_by": result.get("stopped_by"),
    }


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def hex_view(vault: Vault, scope: Scope, descriptor: Descriptor) -> list[tuple[str, str, str]]:
    """The first :data:`HEX_BYTES` as rows of ``(offset, hex, printable ASCII)``, 16 bytes each."""
    length = min(HEX_BYTES, descriptor.size)
    data = vault.read_range(scope, descriptor.artifact_id, 0, length) if length else b""
    rows = []
    for offset in range(0, len(data), 16):
        piece = data[offset : offset + 16]
        shown = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in piece)
        rows.append((f"{offset:08x}", piece.hex(" "), shown))
    return rows


def thumbnail_png(vault: Vault, scope: Scope, descriptor: Descriptor) -> bytes | None:
    """A PNG at most :data:`THUMBNAIL_SIZE` of an image artifact, made here; None if it is not a decodable image."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    decoder = IMAGE_FORMATS.get(base_type(descriptor.media_type))
    if decoder is None or descriptor.size > IMAGE_MAX_BYTES:
        return None
    data = vault.read_bytes(scope, descriptor.artifact_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[decoder]) as image:
                width, height = image.size  # read from the header: nothing decoded yet
                if width * height > IMAGE_MAX_PIXELS:
                    return None
                image.thumbnail(THUMBNAIL_SIZE)
                out = io.BytesIO()
                image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB").save(out, format="PNG")
    except (
        UnidentifiedImageError,
        Image.DecompressionBombError,
        Image.DecompressionBombWarning,
        OSError,
        ValueError,
        SyntaxError,
    ):
        return None
    return out.getvalue()
