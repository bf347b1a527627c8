"""Materialising binary tool content (DESIGN.md idea 2): store every binary part, hand back references.

::

    from refvault.content import materialize, Limits
    projected = await materialize(vault, scope, result, provenance="mcp:server/tool",
                                  tool_call_id="call_1", limits=Limits())

``result`` is an ``mcp.types.CallToolResult`` (``mcp`` is imported only when
one arrives: the dict path works without it) or its wire-form dict; the
projection is a new value of the same kind. Each ``image``, ``audio`` and
embedded ``resource`` blob block becomes a ``resource_link`` block::

    {"type": "resource_link", "uri": "refvault://art_...", "name": "<safe filename>",
     "mimeType": "<stored media type>", "size": <raw bytes>, "description": "...stored by refvault...",
     "_meta": {"sha256": "<hex>", "content_index": i, "artifact_id": "art_...", "content_type": "image",
               "disclosure": "sealed", "declared_media_type": ..., "detected_media_type": ...,
               "media_type_check": "match" | "mismatch" | "unknown"}}

Invariants, each stated once, with where it is enforced and tested
(tests in ``tests/test_materialize.py`` run on the memory and embedded backends):

* **No bytes reach the model.** After projection no base64 of any stored part
  remains anywhere in the result: content blocks, text, ``structuredContent``
  (plain, as a ``data:`` URL, nested, URL-safe or unpadded, truncated or
  line-wrapped copies), ``_meta`` and annotations; each trace becomes the
  part's ``refvault://`` URI (``_Scrubber``). ``structuredContent`` over
  ``Limits.structured_content`` JSON characters after projection is replaced by
  ``{"refvault_omitted": "<why, and its size>"}``. Tested by
  ``test_no_base64_anywhere_*``, ``test_structured_content_*`` and the
  hypothesis test ``test_random_mixes``, which serialise the projection and
  search it for the base64 and every 64-character window of it.
* **Everything is checked before the first write.** The call's arguments and
  scope, every block's shape, strict canonical base64 (no whitespace, no
  URL-safe alphabet, no non-zero padding bits), empty parts, the per-part
  (64 MiB) and per-result (128 MiB) limits on decoded bytes (computed from the
  encoded length, so a huge string is refused before it is decoded) and every
  media type. A refusal is :class:`~refvault.errors.InvalidResult`,
  :class:`~refvault.errors.EmptyPart` or :class:`~refvault.errors.TooLarge`,
  never a truncation, and leaves the store unchanged (manifests, blob records,
  blobs and temporaries). Tested by ``test_refusals_write_nothing``,
  ``test_not_a_tool_result``, ``test_bad_call_arguments_write_nothing``,
  ``test_per_part_limit_at_and_over``, ``test_per_result_limit_at_and_over``,
  ``test_huge_part_is_refused_before_it_is_decoded`` and
  ``test_a_refusal_later_in_the_result_is_found_before_any_write``.
* **Media types are canonical and neither declared nor detected is trusted
  blindly.** See :mod:`refvault.content.sniff`: a disagreement stores
  ``application/octet-stream`` and records both, in ``source_version`` and in
  the link's ``_meta``. Tested by ``test_media_type_*``, ``test_sniff_*`` and
  ``test_classify_and_extensions``.
* **Filenames are safe.** From an embedded resource's URI: basename only,
  query and fragment dropped, control/format characters removed, ``.`` and
  ``..`` refused, capped at 128 characters keeping the extension; otherwise
  ``content-NNN.<ext>``. Tested by ``test_safe_filename*`` and
  ``test_fallback_names_use_the_index_and_the_stored_type``.
* **One moment, one order.** All parts of one result share one ``created_at``;
  parts are stored in content order; ``content_index`` is the block's index in
  ``content``. Tested by ``test_one_created_at_and_content_index``.
* **Idempotent.** Each part's idempotency key is derived from
  (``tool_call_id``, ``content_index``) alone, so a retry returns the same
  artifact ids and stores nothing new (the same id with other bytes is refused).
  Tested by ``test_retry_dedups``, ``test_retry_with_other_bytes_under_the_same_call_is_refused``
  and ``test_random_mixes``.
* **Failures are permanent and partial failures are safe.** Every failure is a
  :class:`~refvault.errors.MaterializationError` (``permanent = True``: the
  tool call already happened; do not re-issue it). A failure after some parts
  were stored leaves them stored and returns no projection; a retry reuses them.
  Tested by ``test_partial_failure_then_retry``.
* **Cancellation** is checked before each write and before projection: a
  cancelled materialisation returns nothing and writes no later part. Tested by
  ``test_cancellation_between_parts``.
* **Scoped and sealed.** Parts are stored in the caller's scope (another scope
  gets ``NotFound``), ``sealed`` unless ``disclosure="model"`` is passed.
  Resource links already in the result pass through and are never fetched.
  Values with no binary part come back unchanged (equal, but a copy; the input
  is never mutated). Tested by ``test_foreign_scope_sees_nothing``,
  ``test_sealed_by_default_and_model_on_request`` and
  ``test_resource_link_is_never_fetched_and_text_only_results_are_unchanged``.
* **mcp is optional.** ``mcp.types`` is imported only when a non-dict result
  arrives. Tested by ``test_dict_path_works_without_mcp`` and
  ``test_importing_refvault_content_does_not_import_mcp``.
"""

from refvault.content.materialize import Limits, materialize
from refvault.content.sniff import sniff_media_type

__all__ = ["Limits", "materialize", "sniff_media_type"]
