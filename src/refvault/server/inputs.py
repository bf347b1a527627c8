"""What a request carries, read and checked: artifact ids, capture metadata, query bodies, body sizes.

Every function here raises a :mod:`refvault.errors` class (a 400, 404 or 413 problem) and never
repeats the value it refused. Request bodies are read within bounds: a capture's piece by piece
for a worker thread (:func:`body_pieces`), a query body whole up to :data:`MAX_JSON_BODY`
(:func:`bounded_body`); over the bound is :class:`BodyTooLarge`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import anyio.from_thread
from fastapi import Depends, Header
from starlette.requests import Request

from refvault.errors import InvalidArgument, InvalidMetadata, InvalidQuery, NotFound, TooLarge
from refvault.ids import id_check, is_artifact_id
from refvault.model import parse_time
from refvault.policy import DEFAULT_PURPOSE, DEFAULT_RECIPIENT, check_purpose, check_recipient
from refvault.server.schema import METADATA_FIELDS, QUERY_FIELDS

__all__ = [
    "MAX_JSON_BODY",
    "BodyTooLarge",
    "ReadFor",
    "Reader",
    "reader",
    "body_pieces",
    "bounded_body",
    "capture_options",
    "checked_id",
    "declared_length",
    "declassify_arguments",
    "pair",
    "query_arguments",
]

MAX_JSON_BODY = 1 << 20


class BodyTooLarge(TooLarge):
    """A capture's body went over the server's ``max_body``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than this server accepts ({limit} bytes)")


PURPOSE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/\-]{0,127}$"  # refvault.policy.check_purpose, as the schema states it
RECIPIENT_PATTERN = r"^(user|export|(model|tool):[A-Za-z0-9._:/@+\-]{1,122})$"  # refvault.policy.check_recipient


@dataclass(frozen=True, slots=True)
class ReadFor:
    """Why a read is made and who its bytes go to: the ``Refvault-Purpose`` and ``Refvault-Recipient`` headers."""

    purpose: str = DEFAULT_PURPOSE
    recipient: str = DEFAULT_RECIPIENT

    def kwargs(self) -> dict[str, str]:
        """``purpose=`` and ``recipient=`` for a vault read or a :mod:`refvault.read` function."""
        return {"purpose": self.purpose, "recipient": self.recipient}


async def reader(
    purpose: Annotated[
        str,
        Header(
            alias="Refvault-Purpose",
            pattern=PURPOSE_PATTERN,
            description="Why the bytes are read (the tenant's policy decides by it): 1-128 characters from"
            " A-Z a-z 0-9 . _ : / -. Default: default.",
        ),
    ] = DEFAULT_PURPOSE,
    recipient: Annotated[
        str,
        Header(
            alias="Refvault-Recipient",
            pattern=RECIPIENT_PATTERN,
            description="Who the bytes go to: user, export, model:<name> or tool:<name> (the tenant's policy"
            " decides by it). Default: user.",
        ),
    ] = DEFAULT_RECIPIENT,
) -> ReadFor:
    """The read's purpose and recipient from its headers, checked (a bad one is a 400, never echoed)."""
    return ReadFor(check_purpose(purpose), check_recipient(recipient))


Reader = Annotated[ReadFor, Depends(reader)]
"""The dependency every read route takes: its ``Refvault-Purpose`` and ``Refvault-Recipient``."""


def checked_id(artifact_id: str) -> str:
    """The id if it is well formed or mis-copied (the vault then says so, with the id meant if it finds one:
    :func:`refvault.ids.lookup_id`); else the same NotFound as an absent id (without echoing the string)."""
    if not is_artifact_id(artifact_id) and id_check(artifact_id) != "miscopied":
        raise NotFound("(not an artifact id)")
    return artifact_id


def _reject_constant(name: str) -> Any:
    raise InvalidArgument("non-finite number")  # json.loads's parse_constant: caught below


def _loads(text: str | bytes, what: str, error: type[InvalidArgument]) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise error(f"{what} is not valid JSON") from None


def capture_options(metadata: str | None, content_type: str | None) -> dict[str, Any]:
    """``Vault.put`` keyword arguments from the ``Refvault-Metadata`` header and ``Content-Type``."""
    options: dict[str, Any] = {"media_type": content_type or "application/octet-stream"}
    if metadata is None:
        return options
    if not metadata.isascii():
        raise InvalidMetadata("the Refvault-Metadata header must be ASCII JSON (escape other characters as \\uXXXX)")
    fields = _loads(metadata, "the Refvault-Metadata header", InvalidMetadata)
    if not isinstance(fields, dict):
        raise InvalidMetadata("the Refvault-Metadata header must be a JSON object")
    if not set(fields) <= set(METADATA_FIELDS):
        raise InvalidMetadata(f"Refvault-Metadata accepts only the fields {', '.join(METADATA_FIELDS)}")
    for name, value in fields.items():
        if value is None and name in ("media_type", "disclosure"):
            continue  # null means the default
        if name in ("expires_at", "created_at") and value is not None:
            value = _timestamp(name, value)
        if name == "completeness" and isinstance(value, dict) and "records" in value:
            value = {**value, "records": _whole(value["records"])}
        options[name] = value
    return options


def _whole(value: object) -> object:
    """``2.0`` as ``2``: JSON Schema's ``integer`` includes integral numbers written with a fraction.

    Every other value is returned unchanged (``2.5`` stays a float, which the read then refuses).
    """
    return int(value) if isinstance(value, float) and value.is_integer() else value


def declared_length(value: str | None) -> int | None:
    """A ``Content-Length`` value as a number (capped at 2**63); None if absent or not ASCII digits."""
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    return int(value) if len(value) <= 19 else 2**63  # int() refuses very long digit strings


def _timestamp(name: str, value: object) -> Any:
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidMetadata(f"{name} must be an ISO 8601 timestamp with a UTC offset")
    try:
        return parse_time(value)
    except (ValueError, OverflowError):
        raise InvalidMetadata(f"{name} must be an ISO 8601 timestamp with a UTC offset") from None


def pair(text: str | None) -> tuple[int, int | None] | None:
    """``"START,END"`` or ``"OFFSET,LENGTH"`` (a query parameter the schema's pattern checked) as two numbers."""
    if text is None:
        return None
    first, _, second = text.partition(",")
    return int(first), (int(second) if second else None)


def query_arguments(body: bytes) -> dict[str, Any]:
    """The keyword arguments of a query request body (``{}`` when empty); null values mean the default."""
    if not body.strip():
        return {}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidQuery("the query body must be UTF-8 JSON") from None
    arguments = _loads(text, "the query body", InvalidQuery)
    if not isinstance(arguments, dict):
        raise InvalidQuery("the query body must be a JSON object")
    if not set(arguments) <= set(QUERY_FIELDS):
        raise InvalidQuery(f"the query body accepts only the fields {', '.join(QUERY_FIELDS)}")
    for name in ("limit", "max_scan"):  # the integer fields (QueryRequest)
        arguments[name] = _whole(arguments.get(name))
    if isinstance(arguments.get("record_range"), list):
        arguments["record_range"] = [_whole(value) for value in arguments["record_range"]]
    return {name: value for name, value in arguments.items() if value is not None}


def declassify_arguments(body: bytes) -> tuple[list[str], str]:
    """``remove`` and ``reason`` of a declassify request body (checked again by ``Vault.declassify``)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("the declassify body must be UTF-8 JSON") from None
    arguments = _loads(text, "the declassify body", InvalidArgument)
    if not isinstance(arguments, dict) or set(arguments) != {"remove", "reason"}:
        raise InvalidArgument('the declassify body must be a JSON object {"remove": [label, ...], "reason": "..."}')
    remove, reason = arguments["remove"], arguments["reason"]
    if not isinstance(remove, list):
        raise InvalidArgument("remove must be a list of label names")
    return remove, reason


def body_pieces(receive: Callable[[], Coroutine[Any, Any, bytes | None]], limit: int) -> Iterator[bytes]:
    """The request body as a blocking iterator, for a worker thread; raises :class:`BodyTooLarge` past ``limit``."""
    total = 0
    while True:
        piece: bytes | None = anyio.from_thread.run(receive)
        if piece is None:
            return
        total += len(piece)
        if total > limit:
            raise BodyTooLarge(limit)
        if piece:
            yield piece


async def bounded_body(request: Request, limit: int) -> bytes:
    """The whole request body, read on the event loop; :class:`BodyTooLarge` past ``limit`` bytes."""
    buffer = bytearray()
    async for piece in request.stream():
        buffer += piece
        if len(buffer) > limit:
            raise BodyTooLarge(limit)
    return bytes(buffer)
