"""Outgoing requests as leaves to check, and the decoded views of a leaf that are scanned.

:func:`walk` visits a request once and yields every string (and bytes) leaf with
its **site** (``messages[3].content[0].text``, ``input[1].output``,
``contents[0].parts[1].inline_data.data``, ``system``) and its **kind**:

``text``
    conversation text: user, assistant, system, instructions, tool schemas, anything
    not below (exempt from the size arm);
``tool``
    what a tool returned: content of a ``tool``/``function`` role message (OpenAI
    chat), a ``tool_result`` block (Anthropic), a ``function_call_output`` item
    (OpenAI responses), a ``functionResponse`` part (Gemini);
``args``
    tool-call arguments: ``function.arguments`` (OpenAI chat; a JSON string),
    ``arguments`` of a ``function_call`` item (responses), ``input`` of a
    ``tool_use`` block (Anthropic; an object), ``args`` of a ``functionCall`` part
    (Gemini; an object);
``data``
    a binary payload: a ``data:`` URL anywhere, a base64 ``data`` field (Anthropic
    ``source``, Gemini ``inline_data``, OpenAI ``input_audio``), ``file_data``,
    or a ``bytes`` value;
``key``
    a dict key that is long or not an identifier (it is scanned too).

The walk understands OpenAI chat completions and responses, Anthropic messages
and Gemini ``contents`` by their field names, with no format switch, so mixed
and unknown shapes are walked generically (any mapping, list, tuple, set or
frozenset; objects with ``model_dump()`` are walked as their dump, dataclasses
and ``SimpleNamespace`` by their fields; any other object is checked as its
``str``). Sites never contain content:
keys that are not short identifiers are shown by position (``<key 2>``).

For ``tool`` and ``args`` the size arm measures the string (UTF-8 bytes) or
the object (compact JSON); for ``data`` the string or bytes; ``text`` and keys
are exempt. An object payload (``tool_use.input``) is one sized leaf with no
value, and its strings are ``args``/``tool`` leaves with no size.

:func:`views` gives the byte strings the content arm scans for a leaf, each
with a map back to the leaf's own UTF-8 bytes (used to redact): the raw bytes;
the raw bytes with JSON string escapes decoded (``\\n``, ``\\"``, ``\\uXXXX``
with surrogate pairs; also ``\\xNN`` runs and ``\\'`` of a Python bytes repr),
twice for JSON inside JSON; then percent escapes decoded; then the text through
:func:`normalize_text` (NFKC, case folding, ignorable characters dropped); and
for a data URL or a base64 field, the decoded payload (a hit there redacts the
whole leaf). Base64 and hex runs inside text are found by the scanner and
decoded (a hit redacts the run), and so are the runs inside what they decode,
to three encodings deep (:func:`payload_views`). Protected text goes through
the same :func:`normalize_text` (:func:`normalized_form`).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import dataclasses
import functools
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import unquote_to_bytes

from refvault.guard.fingerprints import FOLD

__all__ = [
    "Leaf",
    "LeafKind",
    "SpanMap",
    "View",
    "decode_base64",
    "normalize_text",
    "normalized_form",
    "payload_views",
    "views",
    "walk",
]

LeafKind = Literal["text", "tool", "args", "data", "key"]

_TOOL_ROLES: Final = frozenset({"tool", "function", "ipython"})
_TOOL_RESULT_TYPES: Final = frozenset(
    {
        "tool_result",
        "function_call_output",
        "custom_tool_call_output",
        "mcp_tool_result",
        "computer_call_output",
        "local_shell_call_output",
    }
)
_CALL_TYPES: Final = frozenset(
    {"tool_use", "server_tool_use", "mcp_tool_use", "function_call", "custom_tool_call", "mcp_call"}
)
_GEMINI_CALLS: Final = frozenset({"functionCall", "function_call"})
_GEMINI_RESPONSES: Final = frozenset({"functionResponse", "function_response"})
_INLINE_DATA: Final = frozenset({"inline_data", "inlineData", "input_audio", "source"})
_DATA_KEYS: Final = frozenset({"file_data", "b64_json", "image_base64", "audio_base64"})
_SAFE_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,31}\Z")
_BASE64_TEXT: Final = re.compile(r"[A-Za-z0-9+/_\-\r\n]+={0,2}\s*\Z")
_ESCAPE: Final = re.compile(
    rb'\\u[0-9a-fA-F]{4}(?:\\u[0-9a-fA-F]{4})*|\\x[0-9a-fA-F]{2}(?:\\x[0-9a-fA-F]{2})*|\\["\\/bfnrt\']'
)
_SIMPLE_ESCAPES: Final = {
    ord('"'): b'"',
    ord("'"): b"'",
    ord("\\"): b"\\",
    ord("/"): b"/",
    ord("b"): b"\b",
    ord("f"): b"\f",
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
}
_UNESCAPE_LEVELS: Final = 2
_PERCENT: Final = re.compile(rb"(?:%[0-9A-Fa-f]{2})+")
_D: Final = ("d", "D")
_SPECIAL_KEYS: Final = frozenset({"arguments", "input", "args", "response", "data", *_GEMINI_RESPONSES, *_DATA_KEYS})


class Leaf(NamedTuple):
    """One place in a request: its site, kind, the value the content arm scans and the size the size arm measures."""

    site: str
    kind: LeafKind
    value: str | bytes | None  # None: a sized object payload whose strings are leaves of their own
    size: int | None  # None: exempt from the size arm


# A visitor returns a replacement for the leaf, or None to keep it.
Visitor = Callable[[Leaf], object]


@dataclass(frozen=True, slots=True)
class _Context:
    kind: LeafKind  # "text", "tool" or "args" for the strings below
    sized: bool  # whether those strings are measured by the size arm one by one


_TEXT: Final = _Context("text", False)
_TOOL: Final = _Context("tool", True)
_ARGS: Final = _Context("args", True)


def walk(request: object, visit: Visitor, *, rewrite: bool = False, min_chars: int = 0, min_bytes: int = 0) -> object:
    """Call ``visit`` on every leaf of ``request``; with ``rewrite``, return a copy with the replacements made.

    Without ``rewrite`` the return value is ``request`` itself and replacements are ignored. Strings and
    keys inside containers of fewer than ``min_chars`` characters, or ASCII and of fewer than
    ``min_bytes``, are not visited (the guard passes lengths under which no arm can flag anything).
    """
    if isinstance(request, str):
        return _string(request, "text", _TEXT, visit, rewrite, data_hint=False)
    if isinstance(request, bytes | bytearray | memoryview):
        return _leaf(Leaf("body", "data", bytes(request), len(request)), request, visit, rewrite)
    return _Walker(visit, rewrite, min_chars, max(min_chars, min_bytes)).node(request, "", _TEXT, None)


class _Walker:
    def __init__(self, visit: Visitor, rewrite: bool, min_chars: int, min_bytes: int) -> None:
        self.visit = visit
        self.rewrite = rewrite
        self.min_chars = min_chars
        self.min_bytes = min_bytes
        self.active: set[int] = set()  # ids of objects being walked by their fields

    def small(self, text: str) -> bool:
        """Whether ``text`` is too short for any arm."""
        n = len(text)
        return n < self.min_chars or (n < self.min_bytes and text.isascii())

    def node(self, node: object, site: str, ctx: _Context, parent_key: str | None) -> object:
        kind = type(node)
        if kind is str:
            return _string(node, site or "text", ctx, self.visit, self.rewrite, data_hint=False)  # type: ignore[arg-type]
        if kind is dict:
            return self.mapping(node, site, ctx, parent_key)  # type: ignore[arg-type]
        if kind is list or kind is tuple:
            return self.sequence(node, site, ctx, parent_key)  # type: ignore[arg-type]
        if node is None or kind is int or kind is float or kind is bool:
            return node
        if isinstance(node, str):
            return _string(node, site or "text", ctx, self.visit, self.rewrite, data_hint=False)
        if isinstance(node, bytes | bytearray | memoryview):
            leaf = Leaf(site or "body", "data", bytes(node), len(node))
            return _leaf(leaf, node, self.visit, self.rewrite)
        if isinstance(node, Mapping):
            return self.mapping(node, site, ctx, parent_key)
        if isinstance(node, list | tuple):
            return self.sequence(node, site, ctx, parent_key)
        dump = getattr(node, "model_dump", None)
        if callable(dump) and not isinstance(node, type):
            dumped = dump()
            result = self.node(dumped, site, ctx, parent_key)
            if not self.rewrite:
                return node
            try:
                return type(node).model_validate(result)  # type: ignore[attr-defined]
            except Exception:  # a rebuilt model that no longer validates is sent as its dump
                return result
        if isinstance(node, set | frozenset):
            items = self.sequence(list(node), site, ctx, parent_key)
            return type(node)(items) if self.rewrite else node  # type: ignore[call-overload]
        if isinstance(node, type):
            return node
        fields = _fields(node)
        if fields is not None:
            if id(node) in self.active:  # a cycle: its strings are visited already
                return node
            self.active.add(id(node))
            try:
                result = self.mapping(fields, site, ctx, parent_key)
            finally:
                self.active.discard(id(node))
            if not self.rewrite or result == fields:
                return node
            try:
                if dataclasses.is_dataclass(node):
                    return dataclasses.replace(node, **result)  # type: ignore[type-var, arg-type]
                return SimpleNamespace(**result)  # type: ignore[arg-type]
            except Exception:  # not rebuildable: sent as its fields
                return result
        try:  # anything else is checked as its text
            text = str(node)
        except Exception:
            return node
        if self.small(text):
            return node
        replaced = _string(text, site or "text", ctx, self.visit, self.rewrite, data_hint=False)
        return node if replaced is text else replaced

    def sequence(self, node: list[Any] | tuple[Any, ...], site: str, ctx: _Context, parent_key: str | None) -> object:
        small = self.min_bytes
        items = [
            item
            if (type(item) is str and len(item) < small and self.small(item)) or item is None
            else self.node(item, f"{site}[{i}]", ctx, parent_key)
            for i, item in enumerate(node)
        ]
        if not self.rewrite:
            return node
        return tuple(items) if isinstance(node, tuple) else items

    def mapping(self, node: Mapping[Any, Any], site: str, ctx: _Context, parent_key: str | None) -> object:
        role = node.get("role")
        kind = node.get("type")
        if (type(role) is str and role.lower() in _TOOL_ROLES) or (
            type(kind) is str and (kind in _TOOL_RESULT_TYPES or kind.endswith("_tool_result"))
        ):
            ctx = _TOOL
        rewrite = self.rewrite
        small = self.min_bytes
        out: dict[Any, Any] = {}
        prefix = site + "." if site else ""
        for i, (key, value) in enumerate(node.items()):
            kind_of_key = type(key)
            name = _key_name(key) if kind_of_key is str else None
            value_type = type(value)
            if (
                (value_type is str and len(value) < small and self.small(value))
                or value is None
                or value_type is int
                or value_type is bool
                or value_type is float
            ) and (name is not None or (kind_of_key is str and len(key) < small and self.small(key))):
                if rewrite:  # nothing here can be flagged: skip the site and the leaf
                    out[key] = value
                continue
            key_site = prefix + (name or f"<key {i}>")
            new_key = key
            if name is None and isinstance(key, str) and not self.small(key):
                new_key = _leaf(Leaf(f"{key_site}#key", "key", key, None), key, self.visit, rewrite)
                if new_key in out:
                    new_key = f"{new_key}#{i}"
            if key in _SPECIAL_KEYS:
                new_value = self.child(key, value, key_site, ctx, parent_key, kind)
            else:
                new_value = self.node(value, key_site, ctx, name)
            if rewrite:
                out[new_key] = new_value
        return out if rewrite else node

    def child(self, key: str, value: object, site: str, ctx: _Context, parent_key: str | None, kind: object) -> object:
        if (
            key == "arguments"
            or (key == "input" and kind in _CALL_TYPES)
            or (key == "args" and parent_key in _GEMINI_CALLS)
        ):
            return self.payload(value, site, _ARGS)
        if key == "response" and parent_key in _GEMINI_RESPONSES:
            return self.payload(value, site, _TOOL)
        if key in _GEMINI_RESPONSES:
            return self.node(value, site, _TOOL, key)
        if isinstance(value, str) and (
            key in _DATA_KEYS or (key == "data" and (kind == "base64" or parent_key in _INLINE_DATA))
        ):
            return _string(value, site, ctx, self.visit, self.rewrite, data_hint=True)
        return self.node(value, site, ctx, key)

    def payload(self, value: object, site: str, ctx: _Context) -> object:
        """Tool-call arguments or a tool's response: a string leaf, or an object sized as a whole."""
        if isinstance(value, str):
            return _string(value, site, ctx, self.visit, self.rewrite, data_hint=False)
        if isinstance(value, Mapping | list | tuple):
            replaced = self.visit(Leaf(site, ctx.kind, None, _json_size(value)))
            if replaced is not None:
                return replaced if self.rewrite else value
            return self.node(value, site, _Context(ctx.kind, False), None)
        return self.node(value, site, ctx, None)


def _fields(node: object) -> dict[str, Any] | None:
    """A dataclass instance's fields, or a plain attribute object's ``vars`` (SimpleNamespace); else None."""
    if dataclasses.is_dataclass(node):
        return {f.name: getattr(node, f.name, None) for f in dataclasses.fields(node)}
    if isinstance(node, SimpleNamespace):
        return dict(vars(node))
    return None


@functools.lru_cache(maxsize=4096)
def _key_name(key: str) -> str | None:
    """The key as shown in a site, or None when it is not a short identifier (it is then shown by position)."""
    return key if _SAFE_KEY.match(key) else None


def _string(value: str, site: str, ctx: _Context, visit: Visitor, rewrite: bool, *, data_hint: bool) -> object:
    if (value[:1] in _D and _is_data_url(value)) or (data_hint and len(value) >= 16 and _BASE64_TEXT.match(value)):
        leaf = Leaf(site, "data", value, _utf8_size(value))
    else:
        leaf = Leaf(site, ctx.kind, value, _utf8_size(value) if ctx.sized else None)
    replaced = visit(leaf)
    return replaced if rewrite and replaced is not None else value


def _leaf(leaf: Leaf, original: object, visit: Visitor, rewrite: bool) -> object:
    replaced = visit(leaf)
    return replaced if rewrite and replaced is not None else original


def _utf8_size(value: str) -> int:
    if value.isascii():
        return len(value)
    return len(value.encode("utf-8", "surrogatepass"))


def _json_size(value: object) -> int:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return 0
    return _utf8_size(text)


def _is_data_url(value: str) -> bool:
    return value[:5].lower() == "data:" and "," in value[:512]


# -- views: what the content arm scans for one leaf ------------------------------------------------------------------


class SpanMap:
    """Maps offsets in a decoded view back to the leaf's raw bytes (escapes map as a whole)."""

    __slots__ = ("_literal", "_out", "_raw_end", "_raw_start")

    def __init__(self) -> None:
        self._out: list[int] = []
        self._raw_start: list[int] = []
        self._raw_end: list[int] = []
        self._literal: list[bool] = []

    def add(self, out_start: int, raw_start: int, raw_end: int, literal: bool) -> None:
        self._out.append(out_start)
        self._raw_start.append(raw_start)
        self._raw_end.append(raw_end)
        self._literal.append(literal)

    def start(self, x: int) -> int:
        i = max(0, bisect.bisect_right(self._out, x) - 1)
        return self._raw_start[i] + (x - self._out[i]) if self._literal[i] else self._raw_start[i]

    def end(self, y: int) -> int:
        i = max(0, bisect.bisect_right(self._out, y - 1) - 1)
        return self._raw_start[i] + (y - self._out[i]) if self._literal[i] else self._raw_end[i]

    def add_mapped(self, out_start: int, x0: int, x1: int, outer: SpanMap | None) -> None:
        """Map ``[x0, x1)`` of the previous view, placed at ``out_start`` here, through ``outer`` to raw bytes."""
        if outer is None:
            self.add(out_start, x0, x1, True)
            return
        i = max(0, bisect.bisect_right(outer._out, x0) - 1)
        x = x0
        while x < x1:
            seg_end = outer._out[i + 1] if i + 1 < len(outer._out) else x1
            upto = min(seg_end, x1)
            if outer._literal[i]:
                self.add(out_start + x - x0, outer._raw_start[i] + (x - outer._out[i]), 0, True)
            else:
                self.add(out_start + x - x0, outer._raw_start[i], outer._raw_end[i], False)
            x = upto
            i += 1


class View(NamedTuple):
    """Bytes to scan for a leaf, and how a hit in them maps back to the leaf's raw UTF-8 bytes."""

    data: bytes
    mapping: SpanMap | None  # None: offsets are raw offsets (when ``whole`` is False)
    whole: bool  # a hit anywhere stands for the whole leaf (decoded binary payloads)
    textual: bool  # base64 runs inside it are looked for
    windows: list[tuple[int, int]] | None = None  # only these parts need scanning (None: all)
    text: bool = True  # it may be text (the piece arm scans it); not base64 fields, not binary payloads


def views(leaf: Leaf, raw: bytes, reach: int) -> list[View]:
    """The byte strings the content arm scans for ``leaf`` (whose UTF-8 bytes are ``raw``).

    Each view rewrites the one before it: JSON string escapes decoded (twice, for JSON inside JSON),
    then percent escapes decoded, then the Unicode normalisation of :func:`normalize_text`. A view
    differs from the one before it only around what it rewrote, and a span of ``reach`` bytes or more
    that touches no rewritten part is in the view before it too; so only the parts within
    ``reach - 1`` bytes of a rewrite are scanned (all of it when a rewrite produced a character of
    the base64 alphabet that may have joined a base64 run: ``\\/``, ``%2B``, ``%2F``, ``%3D``).
    A data leaf (a data URL or a base64 field) also gets its decoded payload and that payload's
    views, each standing for the whole leaf.
    """
    binary_text = leaf.kind == "data" and isinstance(leaf.value, bytes)  # bytes leaves get text views too
    if leaf.kind == "data" and not binary_text:
        out = [View(raw, None, False, False, text=False)]
        payload = _decode_data(leaf.value)
        if payload:
            out += payload_views(payload, reach)
        return out
    if b"\\" not in raw and b"%" not in raw and raw.isascii():
        return [View(raw, None, False, True)]
    return [View(raw, None, False, True), *_rewritten(raw, reach, text=not binary_text or _is_utf8(raw))]


def payload_views(payload: bytes, reach: int) -> list[View]:
    """The views of a decoded payload (base64, hex, a data URL's): a hit in any stands for all of it.

    A payload that is not UTF-8 text (an image, say) is scanned as it is, like a binary artifact, and
    not by the piece arm."""
    text = payload.isascii() or _is_utf8(payload)
    out = [View(payload, None, True, True, text=text)]
    if text and (b"\\" in payload or b"%" in payload or not payload.isascii()):
        out += [v._replace(whole=True) for v in _rewritten(payload, reach, text=True)]
    return out


def _rewritten(raw: bytes, reach: int, *, text: bool) -> list[View]:
    out: list[View] = []
    current, mapping = raw, None
    for level in range(_UNESCAPE_LEVELS + 2):
        if level < _UNESCAPE_LEVELS:
            if b"\\" not in current:
                continue
            replacements, joins = _escapes(current), b"\\/" in current
        elif level == _UNESCAPE_LEVELS:
            if not text or b"%" not in current:
                continue
            replacements = _percent_escapes(current)
            joins = any(decoded.translate(None, b"+/=") != decoded for *_, decoded in replacements)
        else:
            if not text or current.isascii():
                continue
            replacements, joins = _unicode_changes(current), False
        rewritten = _rewrite(current, mapping, reach - 1, replacements)
        if rewritten is None:
            continue
        current, mapping, windows = rewritten
        out.append(View(current, mapping, False, True, None if joins else windows))
    return out


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode_data(value: str | bytes | None) -> bytes | None:
    if isinstance(value, bytes):
        return None  # binary already: the raw view is the payload
    if value is None:
        return None
    if _is_data_url(value):
        header, _, payload = value.partition(",")
        if ";base64" in header.lower():
            return decode_base64(payload.encode("ascii", "ignore"))
        return unquote_to_bytes(payload)
    return decode_base64(value.encode("ascii", "ignore"))


def decode_base64(text: bytes) -> bytes | None:
    """Lenient base64 (standard or URL-safe alphabet, line breaks, missing padding); None if it does not decode."""
    data = text.translate(None, b"\r\n \t=")
    if b"-" in data or b"_" in data:
        data = data.translate(bytes.maketrans(b"-_", b"+/"))
    data = data[: len(data) - (len(data) % 4 == 1)]
    try:
        return base64.b64decode(data + b"=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        return None


def _escapes(raw: bytes) -> list[tuple[int, int, bytes]]:
    """``(start, end, decoded)`` of each JSON string escape (and ``\\xNN`` run, ``\\'``) in ``raw``."""
    out: list[tuple[int, int, bytes]] = []
    for m in _ESCAPE.finditer(raw):
        token = m.group()
        if token[1:2] == b"x":  # a bytes repr in log text: \\xNN runs are the bytes themselves
            decoded = bytes.fromhex(token.replace(b"\\x", b"").decode("ascii"))
        elif token[1:2] == b"u":
            units = bytes.fromhex(token.replace(b"\\u", b"").decode("ascii"))
            decoded = units.decode("utf-16-be", "surrogatepass").encode("utf-8", "surrogatepass")
        else:
            decoded = _SIMPLE_ESCAPES[token[1]]
        out.append((m.start(), m.end(), decoded))
    return out


def _percent_escapes(raw: bytes) -> list[tuple[int, int, bytes]]:
    """``(start, end, decoded)`` of each run of percent escapes (``%41%42``) in ``raw``."""
    return [(m.start(), m.end(), bytes.fromhex(m.group().replace(b"%", b"").decode())) for m in _PERCENT.finditer(raw)]


def _unicode_changes(raw: bytes) -> list[tuple[int, int, bytes]]:
    """``(start, end, normalised)`` of each run of non-ASCII characters (with the character before it, which a
    combining mark may compose with) that :func:`normalize_text` changes beyond what the byte fold does.

    The runs are normalised in one call, joined by NUL (which normalisation keeps and nothing composes
    across); a text holding NUL itself is normalised run by run.
    """
    table = _FOLD_TABLE
    if normalize_text(raw).translate(table) == raw.translate(table):
        return []
    spans = [m.span() for m in _NON_ASCII.finditer(raw)]
    runs = [raw[start:end] for start, end in spans]
    normal = [] if b"\x00" in raw else normalize_text(b"\x00".join(runs)).split(b"\x00")
    if len(normal) != len(runs):
        normal = [normalize_text(run) for run in runs]
    return [
        (*span, new)
        for span, run, new in zip(spans, runs, normal, strict=True)
        if run.translate(table) != new.translate(table)
    ]


def _rewrite(
    raw: bytes, outer: SpanMap | None, radius: int, replacements: list[tuple[int, int, bytes]]
) -> tuple[bytes, SpanMap, list[tuple[int, int]]] | None:
    """``raw`` with the ``(start, end, new)`` replacements made (ascending, disjoint), a map from the result
    to the leaf's raw bytes (composed with ``outer``), and the merged parts of the result within ``radius``
    bytes of a replacement; None if there is none."""
    if not replacements:
        return None
    parts: list[bytes] = []
    mapping = SpanMap()
    windows: list[tuple[int, int]] = []
    out_len = 0
    last = 0
    for start, end, decoded in replacements:
        if start > last:
            mapping.add_mapped(out_len, last, start, outer)
            parts.append(raw[last:start])
            out_len += start - last
        raw_start = outer.start(start) if outer else start
        raw_end = outer.end(end) if outer else end
        mapping.add(out_len, raw_start, raw_end, False)
        lo, hi = max(0, out_len - radius), out_len + len(decoded) + radius
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], hi)
        else:
            windows.append((lo, hi))
        parts.append(decoded)
        out_len += len(decoded)
        last = end
    if last < len(raw):
        mapping.add_mapped(out_len, last, len(raw), outer)
        parts.append(raw[last:])
        out_len += len(raw) - last
    return b"".join(parts), mapping, [(lo, min(hi, out_len)) for lo, hi in windows]


# -- Unicode normalisation -------------------------------------------------------------------------------------------

_FOLD_TABLE: Final = FOLD.tobytes()
_NON_ASCII: Final = re.compile(rb"[\x00-\x7f]?[\x80-\xff]+")
_IGNORABLE_EXTRA: Final = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164})


@functools.cache
def _unicode_classes() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(ignorable, separator) character classes of this Python's Unicode database, built on first use.

    Ignorable: format characters (category Cf: zero-width space and joiners, word joiner, BOM, soft
    hyphen, bidi controls, tags), variation selectors and the other default-ignorable code points.
    Separator: non-ASCII punctuation and spaces (categories P and Z).
    """
    ignorable: list[int] = []
    separator: list[int] = []
    for block in (range(0x80, 0x20000), range(0xE0000, 0xE1000)):
        for code in block:
            category = unicodedata.category(chr(code))
            if category == "Cf" or code in _IGNORABLE_EXTRA or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF:
                ignorable.append(code)
            elif category[0] in "PZ":
                separator.append(code)
    return re.compile(_char_class(ignorable)), re.compile(_char_class(separator))


def _char_class(codes: list[int]) -> str:
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]"


def normalize_text(data: bytes) -> bytes:
    """The Unicode normalisation both sides share: NFKC, case folding, ignorable characters removed,
    non-ASCII punctuation and spaces made a space (bytes that are not UTF-8 are kept as they are).

    Applied to protected text and to outgoing text alike, before the byte fold
    (:data:`~refvault.guard.fingerprints.FOLD`); it is what makes full-width letters, zero-width
    characters sprinkled through a text, non-ASCII capitals and typographic dashes or spaces match
    the plain text. Tested in ``tests/security/test_guard_transforms.py``.
    """
    ignorable, separator = _unicode_classes()
    text = unicodedata.normalize("NFKC", data.decode("utf-8", "surrogateescape")).casefold()
    return separator.sub(" ", ignorable.sub("", text)).encode("utf-8", "surrogateescape")


def normalized_form(data: bytes) -> bytes | None:
    """The :func:`normalize_text` form of protected UTF-8 text when it differs beyond the byte fold; else None.

    Bytes that are not UTF-8 (binary artifacts) and ASCII text (which the byte fold covers) have none.
    """
    if data.isascii() or not _is_utf8(data):
        return None
    normal = normalize_text(data)
    return None if normal.translate(_FOLD_TABLE) == data.translate(_FOLD_TABLE) else normal
