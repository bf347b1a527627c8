"""Materialising binary tool content: store every binary part, hand back references.

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
               "media_type_check": "match" | "mismatch" | "unknown",
               "source_uri": ..., "upstream_meta": {...}, "upstream_resource_meta": {...}}}

(the last three only where the upstream gave them: the embedded resource's
URI as scheme, host and path; the block's ``_meta``; the resource's ``_meta``,
each scrubbed).

**Inline parts.** Base64-encoded bytes inside any string of the result (text,
an embedded text resource, ``structuredContent``, ``_meta``; not dict keys, not
a typed part's own field), as :func:`refvault.content.encoded.find_encoded`
defines them (a ``data:`` URL, or a run of 128+ base64 characters decoding to
binary), are parts too: stored, and replaced where they are by the part's
``refvault://`` URI. Each gets a ``resource_link`` appended to ``content``
(after the blocks that were there, which keep their indices) whose ``_meta`` has
``"content_type": "inline"``, ``found_in`` (``content[i]``, ``structuredContent``,
``_meta``, ...), ``encoding`` (``data_url`` | ``base64``), ``inline_index`` and,
inside a content block, its ``content_index``. A span that is a copy of a typed
part's base64 is that part (its URI replaces it); spans decoding to the same
bytes are one part. Tested in ``tests/security/test_gateway_base64.py``
(``test_inline_parts_keep_the_materialisation_invariants``).

Invariants, each stated once, with where it is enforced and tested
(``tests/content/test_materialize.py`` runs on the memory and embedded backends;
the adversarial cases are in ``tests/content/`` (``test_result_limits.py``, ``test_retries.py``,
``test_scrubbing.py``, ``test_types_and_names.py``, ``test_round_trip.py``)):

* **No bytes reach the model.** After projection no base64 of any stored part
  remains anywhere in the result: content blocks, text, ``structuredContent``,
  ``_meta``, annotations, the link's ``name`` and the recorded ``source_uri``.
  Copies are found in a normalised view (wrapped at any column, split into a
  list of chunks, URL-safe, unpadded, percent-encoded, JSON-escaped, as a
  ``data:`` URL) and exactly the copied span is replaced by the part's
  ``refvault://`` URI; spans of fewer than 4 distinct characters (runs of zero
  bytes) are never replaced, as they match ordinary text. How, and at what
  cost (linear, in bounded memory), is in :mod:`refvault.content.scrub`.
  ``structuredContent`` over ``Limits.structured_content`` JSON characters
  after projection, or nested over 100 levels, is replaced by
  ``{"refvault_omitted": "<why, and its size>"}`` (the gateway passes a large
  bound and offloads it itself). Tested by ``test_no_base64_anywhere_*``,
  ``test_structured_content_*``, ``test_copies_in_other_spellings_*``,
  ``test_random_spellings_of_copies_*``, ``test_direct_and_indexed_searches_agree``,
  ``test_low_information_spans_are_kept``, ``test_names_and_uris_carrying_*``,
  the hypothesis test ``test_random_mixes`` and ``test_f1``-``test_f4``, ``test_f19``.
* **Everything is checked before the first write.** The call's arguments and
  scope, the number of binary parts, inline ones included (``Limits.max_parts``, 1000), every
  block's shape, strict canonical base64 (no whitespace, no URL-safe
  alphabet, no non-zero padding bits), empty parts, the per-part (64 MiB) and
  per-result (128 MiB) limits on decoded bytes (computed from the encoded
  length, so a huge string is refused before it is decoded), every media
  type, nesting over 100 levels outside ``structuredContent``, blocks of an
  unknown kind carrying ``data`` or ``blob``, and blocks naming a
  ``refvault://`` URI (only refvault mints those: an upstream's could pass off
  any artifact of the session as its output, so the result is refused; the
  MCP gateway replaces such blocks with a note before materialising). A
  refusal is :class:`~refvault.errors.InvalidResult`,
  :class:`~refvault.errors.EmptyPart` or :class:`~refvault.errors.TooLarge`,
  never a truncation, and leaves the store unchanged (manifests, blob records,
  blobs and temporaries). Tested by ``test_refusals_write_nothing``,
  ``test_not_a_tool_result``, ``test_bad_call_arguments_write_nothing``,
  ``test_per_part_limit_at_and_over``, ``test_per_result_limit_at_and_over``,
  ``test_max_parts_at_and_over``, ``test_huge_part_is_refused_before_it_is_decoded``,
  ``test_a_refusal_later_in_the_result_is_found_before_any_write``,
  ``test_forged_links_and_unknown_binary_kinds_are_refused`` and
  ``test_deep_structured_content_is_omitted_and_deep_content_refused``.
* **Media types are canonical and neither declared nor detected is trusted
  blindly.** See :mod:`refvault.content.sniff`: a disagreement stores
  ``application/octet-stream`` and records both, in ``source_version`` and in
  the link's ``_meta``; an ``image`` block must declare ``image/*`` and an
  ``audio`` block ``audio/*``; sniffing never promotes undeclared bytes to an
  active type (HTML, SVG, XML, script). Tested by ``test_media_type_*``,
  ``test_sniff_*``, ``test_classify_and_extensions`` and
  ``test_block_kinds_and_active_types``.
* **Names and URIs are safe.** The filename comes from an embedded resource's
  URI: basename only, query and fragment dropped, control/format characters
  removed, characters Windows forbids replaced, trailing dots and spaces
  dropped, ``.``, ``..`` and Windows device names refused, capped at 128
  characters keeping the extension, whose extension is made consistent with
  the stored type; otherwise (or if it carries a part's base64)
  ``content-NNN.<ext>``. The recorded ``source_uri`` keeps scheme, host and
  path only, never a ``data:`` URI. Tested by ``test_safe_filename*``,
  ``test_names_keep_an_extension_*``, ``test_source_uri_*`` and
  ``test_fallback_names_use_the_index_and_the_stored_type``.
* **One moment, one order.** All parts of one result share one ``created_at``,
  also across a retry (the first part's replayed capture gives it); parts are
  stored in content order (a block's typed part, then what it holds inline;
  inline parts outside ``content`` last); ``content_index`` is the block's index in
  ``content``. Tested by ``test_one_created_at_and_content_index`` and
  ``test_a_retry_after_a_partial_failure_keeps_one_created_at``.
* **Idempotent.** Each part's idempotency key is derived from
  (``tool_call_id``, ``content_index``) alone (``inline.<n>`` for the n-th inline part), so a retry returns the same
  artifact ids and stores nothing new (the same id with other bytes is refused).
  Tested by ``test_retry_dedups``, ``test_retry_with_other_bytes_under_the_same_call_is_refused``
  and ``test_random_mixes``.
* **Failures are permanent and partial failures are safe.** Every failure is a
  :class:`~refvault.errors.MaterializationError` (``permanent = True``: the
  tool call already happened; do not re-issue it). A failure after some parts
  were stored leaves them stored and returns no projection; a retry reuses them.
  Tested by ``test_partial_failure_then_retry``.
* **Cancellation** is checked before each write and before projection; a write
  already in flight (in its thread) is waited for before the cancellation is
  re-raised, so nothing lands after ``CancelledError`` is seen. Tested by
  ``test_cancellation_between_parts`` and ``test_no_write_lands_after_materialize_reports_cancellation``.
* **The event loop stays free.** Decoding, sniffing and the projection run in
  ``asyncio.to_thread``. Tested by ``test_materialisation_runs_off_the_event_loop``
  and ``test_f5a_*``.
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
