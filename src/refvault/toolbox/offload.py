"""Offloading an oversized tool result: capture it, and hand the model a bounded preview instead.

Used by the Toolbox for its tools' results and by the MCP gateway for an
upstream server's text results. Invariants (tested in ``tests/toolbox/test_offload.py``):

* The captured bytes are exactly the result's text (UTF-8), with
  ``disclosure="model"``, unless the result was derived from a sealed input:
  then the artifact is sealed and the preview shows type and size only.
* A ``str`` result's media type is sniffed from its first 64 KiB
  (:func:`refvault.content.text_kind.sniff_text_media_type`): JSON Lines, a JSON
  array of objects and CSV are stored as record types, so ``query_artifact``
  selects from them and the preview summarises their records (schema, count,
  first rows) as it does for a list of objects; anything else is
  ``text/plain; charset=utf-8``. Other results are ``application/json``. The
  sniff never changes the bytes.
* If capture fails, the observation says so and carries a bounded truncation
  marked incomplete (nothing of a sealed-derived result); nothing is silently lost.
* Neither the preview nor the truncation shows base64 of binary: runs of it
  are placeholders naming media type and size (:mod:`refvault.read.previews`;
  ``tests/security/test_gateway_base64.py``). The captured artifact keeps the
  text exactly (``read_artifact`` serves it as stored).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from refvault.errors import RefvaultError
from refvault.model import Descriptor, Scope, is_records

if TYPE_CHECKING:
    from refvault.contract import VaultContract

__all__ = ["capture_text", "offload"]

logger = logging.getLogger("refvault.toolbox")


def offload(
    vault: VaultContract,
    scope: Scope,
    text: str,
    result: Any,
    *,
    sealed: bool,
    tool_call_id: str | None,
    run_id: str | None,
    preview_chars: int,
    source: str,
    labels: frozenset[str] = frozenset(),
    derived_from: Sequence[str] = (),
    withheld: bool = False,
) -> tuple[str, list[Descriptor]]:
    """Capture ``text`` (the rendering of ``result``); return the JSON the model sees and what was captured.

    ``result`` is the value ``text`` renders (a str, or a JSON-ready value:
    a list of objects gets a records preview). ``source`` names the tool, for logs.
    ``labels`` and ``derived_from`` are recorded on the artifact (labels follow the data:
    :mod:`refvault.toolbox.taint`). ``withheld``: the model may not see this text (its
    labels), so the preview shows type and size only, as for a sealed result, and a failed
    capture shows nothing of it.
    """
    from refvault.read import previews

    data = text.encode("utf-8", "surrogatepass")
    try:
        descriptor = capture_text(
            vault,
            scope,
            text,
            result,
            sealed=sealed,
            tool_call_id=tool_call_id,
            run_id=run_id,
            labels=labels,
            derived_from=derived_from,
        )
    except Exception as exc:
        logger.warning("offloading a result of tool %s failed: %s", source, type(exc).__name__)
        shown_chars = 0 if sealed or withheld else preview_chars  # sealed or withheld: nothing of it may be shown
        failed = previews.truncation(text, max_chars=shown_chars, reason=type(exc).__name__)
        return json.dumps({"offload_failed": failed}, ensure_ascii=False), []
    if sealed or withheld:
        shown = previews.preview(descriptor, None, max_chars=preview_chars)
    else:
        summary = _records_summary(vault, scope, descriptor, result)
        shown = previews.preview(descriptor, data, value=result, records=summary, max_chars=preview_chars)
    return json.dumps({"offloaded": shown}, ensure_ascii=False), [descriptor]


def capture_text(
    vault: VaultContract,
    scope: Scope,
    text: str,
    result: Any,
    *,
    sealed: bool,
    tool_call_id: str | None,
    run_id: str | None,
    labels: frozenset[str] = frozenset(),
    derived_from: Sequence[str] = (),
) -> Descriptor:
    """Store ``text`` (the rendering of ``result``) exactly, as :func:`offload` does, and return its descriptor.

    Also what ``Toolbox(keep_results=True)`` stores of a result it returns inline. Raises what ``put`` raises.
    """
    data = text.encode("utf-8", "surrogatepass")
    disclosure: Literal["model", "sealed"] = "sealed" if sealed else "model"
    return vault.put(
        scope,
        data,
        media_type=_media_type(data) if isinstance(result, str) else "application/json",
        disclosure=disclosure,
        tool_call_id=tool_call_id,
        run_id=run_id,
        completeness={"status": "complete", "omissions": []},
        labels=labels,
        derived_from=derived_from,
    )


def _media_type(data: bytes) -> str:
    """The media type of a ``str`` result's UTF-8 bytes: a detected text kind, else plain UTF-8 text."""
    from refvault.content.text_kind import PLAIN_TEXT, sniff_text_media_type

    return sniff_text_media_type(data) or PLAIN_TEXT  # None: lone surrogates made it invalid UTF-8; still text


def _records_summary(vault: VaultContract, scope: Scope, descriptor: Descriptor, result: Any) -> Any:
    """For a list of objects, or text stored as a record type: its record schema, count and first rows.

    None if it is not records (then the text or JSON preview applies).
    """
    rows = isinstance(result, list | tuple) and result and all(isinstance(row, Mapping) for row in result)
    if not (rows or (isinstance(result, str) and is_records(descriptor.media_type))):
        return None
    from refvault.read import records
    from refvault.read.previews import RecordsSummary

    try:
        record_set = records.derive(vault, scope, descriptor.artifact_id)
        first = records.query(vault, scope, descriptor.artifact_id, limit=5)
    except RefvaultError:
        return None  # not records after all (e.g. field names differing only in case): the JSON preview applies
    return RecordsSummary(
        fields=record_set.fields,
        count=record_set.count,
        first_rows=tuple(row["record"] for row in first["records"]),
    )
