"""One ADK Part as vault content, and back: payload bytes (content-hashed) and an envelope (every other field).

:func:`encode_part` splits a Part; :func:`decode_part` rebuilds exactly the
Part that was saved from verified payload bytes and the envelope kept in the
artifact's ``source_version`` under :data:`MARK`. :func:`checked_metadata`
takes only ``custom_metadata`` that JSON round-trips exactly;
:func:`adk_filename` tells which vault artifacts are versions of an ADK
artifact, and :func:`version_key` is the idempotency key of one version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from google.adk.artifacts import artifact_util
from google.genai import types

from refvault.errors import InvalidArgument, InvalidMetadata
from refvault.integrations.adk.identity import AdkInputError
from refvault.model import Descriptor, canonical_media_type

__all__ = [
    "MARK",
    "EncodedPart",
    "adk_filename",
    "checked_metadata",
    "decode_part",
    "encode_part",
    "thaw",
    "version_key",
]

MARK = "adk"  # the source_version key that makes a vault artifact one version of an ADK artifact
_TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class EncodedPart:
    """One Part as vault content: the bytes to hash and store, and what rebuilds the Part around them."""

    payload: bytes
    media_type: str
    kind: Literal["text", "inline", "part"]
    envelope: dict[str, Any]  # the Part's JSON without its payload
    mime_type: str | None  # what ADK reports as ArtifactVersion.mime_type


def encode_part(part: types.Part) -> EncodedPart:
    """Split a Part into payload bytes (content-hashed) and an envelope (every other field, exactly)."""
    inline = part.inline_data
    if inline is not None and inline.data is not None:
        envelope = part.model_dump(mode="json", exclude_unset=True, exclude={"inline_data": {"data"}})
        try:
            media_type = canonical_media_type(inline.mime_type)
        except InvalidMetadata:
            media_type = "application/octet-stream"  # the exact MIME type is kept in the envelope
        return EncodedPart(bytes(inline.data), media_type, "inline", envelope, inline.mime_type)
    if inline is None and part.text is not None:
        try:
            payload = part.text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument("a text part must be valid Unicode (it holds a lone surrogate)") from None
        envelope = part.model_dump(mode="json", exclude_unset=True, exclude={"text"})
        return EncodedPart(payload, _TEXT_MEDIA_TYPE, "text", envelope, "text/plain")
    if inline is not None or part.file_data is not None:  # no bytes of its own: the whole Part is the payload
        mime: str | None = inline.mime_type if inline is not None else None
        if inline is None and part.file_data is not None and not artifact_util.is_artifact_ref(part):
            mime = part.file_data.mime_type
        payload = part.model_dump_json(exclude_unset=True).encode("utf-8")
        return EncodedPart(payload, "application/json", "part", {}, mime)
    raise AdkInputError("Not supported artifact type.")


def decode_part(meta: Mapping[str, Any], payload: bytes) -> types.Part:
    """Rebuild the exact Part from verified payload bytes and its envelope."""
    kind = meta["kind"]
    if kind == "part":
        return types.Part.model_validate_json(payload)
    part = types.Part.model_validate_json(json.dumps(meta["part"]))
    if kind == "text":
        return part.model_copy(update={"text": payload.decode("utf-8")})
    inline = part.inline_data or types.Blob()
    return part.model_copy(update={"inline_data": inline.model_copy(update={"data": payload})})


def checked_metadata(custom_metadata: object) -> dict[str, Any]:
    """ADK keeps custom_metadata as given; refvault stores JSON, so only what JSON round-trips exactly is taken."""
    if not custom_metadata:
        return {}
    if not isinstance(custom_metadata, Mapping):
        raise InvalidMetadata("custom_metadata must be a dict")
    try:
        again = json.loads(json.dumps(custom_metadata, allow_nan=False))
    except (TypeError, ValueError):
        again = None
    if again != custom_metadata:
        raise InvalidMetadata(
            "custom_metadata must be plain JSON (string keys; str, int, float, bool, None, list and dict "
            "values; no NaN) so that it loads back exactly as saved"
        )
    return cast(dict[str, Any], again)


def thaw(value: Any) -> Any:
    """A descriptor's read-only nested values as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(item) for item in value]
    return value


def adk_filename(descriptor: Descriptor) -> str | None:
    """The ADK filename of a vault artifact, or None if it is not a version of an ADK artifact."""
    meta = descriptor.source_version.get(MARK)
    if isinstance(meta, Mapping) and isinstance(meta.get("filename"), str) and isinstance(meta.get("version"), int):
        return str(meta["filename"])
    return None


def version_key(filename: str, version: int) -> str:
    digest = hashlib.sha256(filename.encode("utf-8", "surrogatepass")).hexdigest()
    return f"adk:{digest}:{version}"
