"""The parts of a tool result as :func:`refvault.content.materialize` sees them: bounds, places, nesting.

:class:`Limits` bounds one result; :class:`Located` is a binary part found in it (before decoding),
:class:`Part` one checked and decoded, ready to store; :class:`Inline` says where inline base64 was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from refvault.content.sniff import MediaTypeFacts
from refvault.errors import InvalidArgument

KiB = 1 << 10
MiB = 1 << 20

URI_SCHEME = "refvault://"
FILENAME_MAX = 128  # characters, extension kept
SOURCE_URI_MAX = 2048  # longer upstream URIs are not recorded
PROVENANCE_MAX = 1024
MAX_DEPTH = 100  # nesting of objects and arrays in a result; deeper is refused (structuredContent: omitted)
DECODE_CHUNK = 8 * MiB  # base64 characters decoded per call (bounds how long the GIL is held)
BINARY_KINDS = ("image", "audio")
KNOWN_KINDS = frozenset({"text", "image", "audio", "resource", "resource_link"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on one tool result. Anything over is refused with :class:`TooLarge`, never truncated.

    ``per_part`` and ``per_result`` count decoded bytes; ``max_parts`` counts
    binary parts (each is one durable write); ``structured_content`` bounds
    ``structuredContent`` after projection, in JSON characters (over it, the
    value is replaced by a ``refvault_omitted`` note rather than refused: the
    binary parts themselves were stored; a caller that offloads large values
    itself passes a large bound here).
    """

    per_part: int = 64 * MiB
    per_result: int = 128 * MiB
    structured_content: int = 64 * KiB
    max_parts: int = 1000

    def __post_init__(self) -> None:
        for name in ("per_part", "per_result", "structured_content", "max_parts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"Limits.{name} must be a positive integer")


@dataclass(frozen=True, slots=True)
class Inline:
    """Where base64-encoded bytes were found inside a string of the result (an inline part)."""

    number: int  # its place among the result's inline parts, in result order
    found_in: str  # "content[3]", "structuredContent", "_meta", ...
    encoding: str  # "data_url" | "base64"


@dataclass(frozen=True, slots=True)
class Part:
    """One binary part, checked and decoded, ready to store."""

    index: int  # the content block it is (typed) or was found in (inline); -1 outside content
    kind: str  # "image" | "audio" | "resource" | "inline"
    encoded: str
    data: bytes
    facts: MediaTypeFacts
    filename: str
    source_uri: str | None
    inline: Inline | None = None

    @property
    def slot(self) -> int | str:
        """What names the part within its result: its content index, or ``inline.<number>``."""
        return self.index if self.inline is None else f"inline.{self.inline.number}"

    @property
    def label(self) -> str:
        return part_label(self.index, self.kind, self.inline)


@dataclass(frozen=True, slots=True)
class Located:
    """A binary part found in the result, before its bytes are decoded."""

    index: int
    kind: str
    encoded: str
    declared: str | None
    uri: object
    inline: Inline | None = None

    @property
    def label(self) -> str:
        return part_label(self.index, self.kind, self.inline)

    @property
    def content_index(self) -> int | None:
        return self.index if self.index >= 0 else None


def part_label(index: int, kind: str, inline: Inline | None) -> str:
    """How messages name a part: ``content part 3 (image)`` or ``inline part 0 (base64 in structuredContent)``."""
    if inline is None:
        return f"content part {index} ({kind})"
    return f"inline part {inline.number} ({inline.encoding} in {inline.found_in})"


def too_deep(value: object, depth: int = 0) -> bool:
    """True if ``value`` nests objects and arrays more than ``MAX_DEPTH`` levels (checked without recursion)."""
    stack = [(value, depth)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        if level >= MAX_DEPTH:
            return True
        stack.extend((child, level + 1) for child in children if isinstance(child, Mapping | list | tuple))
    return False


def too_deep_note() -> dict[str, str]:
    return {"refvault_omitted": f"structuredContent omitted: it is nested more than {MAX_DEPTH} levels deep"}


def where_found(part: Part) -> dict[str, Any]:
    """Where a part was in its result (recorded in ``source_version`` and in the link's ``_meta``)."""
    if part.inline is None:
        return {"content_index": part.index, "content_type": part.kind}
    where: dict[str, Any] = {"content_index": part.index} if part.index >= 0 else {}
    return {
        **where,
        "content_type": "inline",
        "found_in": part.inline.found_in,
        "encoding": part.inline.encoding,
        "inline_index": part.inline.number,
    }
