"""Limits and defaults of every operation, defined once.

The CLI, the HTTP server (and so its OpenAPI schema), the Python client, the
read functions, the toolbox's read tools and the MCP gateway all take their
defaults and ceilings from here, so a limit changes in one place. Each name
says which argument it bounds; the request types of :mod:`refvault.operations`
enforce them.

:func:`caps_for_model` scales the per-result caps (offload threshold, preview size, the read tools'
defaults and ceilings) to a model's context window; with no model size it gives exactly the fixed
defaults below.

This module is at the bottom of the layers: it imports only :mod:`refvault.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from refvault.errors import InvalidArgument

__all__ = [
    "CHARS_PER_TOKEN",
    "CURSOR_TTL_SECONDS",
    "DEFAULT_CAPS",
    "DEFAULT_GREP_MATCHES",
    "DEFAULT_GREP_SECONDS",
    "DEFAULT_OFFLOAD_TOKENS",
    "DEFAULT_PREVIEW_CHARS",
    "DEFAULT_QUERY_LIMIT",
    "DEFAULT_QUERY_SECONDS",
    "DEFAULT_WINDOW_CHARS",
    "LIST_PAGE",
    "LOAD_IMAGE_BYTES",
    "LOAD_TEXT_CHARS",
    "LONG_LINE_CHARS",
    "MATCH_CHARS",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_FROM_LINE",
    "MAX_IN",
    "MAX_LEAVES",
    "MAX_LIMIT",
    "MAX_LINEAGE_NODES",
    "MAX_LIST_PAGE",
    "MAX_LIST_SUMMARY",
    "MAX_LOAD_IDS",
    "MAX_MATCHES",
    "MAX_MODEL_CONTEXT_TOKENS",
    "MAX_OFFSET",
    "MAX_ORDER",
    "MAX_PATTERN",
    "MAX_PREVIEW_CHARS",
    "MAX_QUERY_SECONDS",
    "MAX_REDACT_BYTES",
    "MAX_REPLAY_IDS",
    "MAX_SECONDS",
    "MIN_MODEL_CONTEXT_TOKENS",
    "MIN_PREVIEW_CHARS",
    "SUMMARY_LIMIT",
    "ModelCaps",
    "caps_for_model",
]

# -- text windows (refvault.read.window) -------------------------------------------------------
DEFAULT_WINDOW_CHARS = 20_000  # characters a window returns unless asked for another number
MAX_CHARS = 200_000  # the most characters one window may return

# -- grep (refvault.read.grep) -------------------------------------------------------------------
DEFAULT_GREP_MATCHES = 100
MAX_MATCHES = 1000  # the most matches one grep call may return
MAX_PATTERN = 1000  # characters of a grep pattern
DEFAULT_GREP_SECONDS = 5.0
MAX_SECONDS = 60.0  # the largest time budget of one grep call
MAX_FROM_LINE = 2**63 - 1
MATCH_CHARS = 500  # characters of a matching line shown (the rest is cut, and said so)
LONG_LINE_CHARS = 1 << 22  # grep handles longer lines in segments; a regex sees only the first

# -- record queries (refvault.read.query) ------------------------------------------------------
DEFAULT_QUERY_LIMIT = 100  # records per page
MAX_LIMIT = 1000  # the most records one page returns (a larger limit is capped to it)
MAX_ORDER = 8  # fields in an order
MAX_IN = 1000  # values of one "in" condition
MAX_DEPTH = 32  # nesting of a where selector
MAX_LEAVES = 256  # conditions in a where selector
DEFAULT_QUERY_SECONDS = 10.0
MAX_QUERY_SECONDS = 600.0  # the largest max_seconds a query accepts
CURSOR_TTL_SECONDS = 3600  # how long a query cursor stays valid

# -- listing (Client.list, GET /v1/artifacts) --------------------------------------------------------
LIST_PAGE = 100  # artifacts per page of a listing, unless asked for another number
MAX_LIST_PAGE = 1000  # the most artifacts one page of a listing holds
MAX_OFFSET = 2**63 - 1

# -- the toolbox's model-facing tools ----------------------------------------------------------
SUMMARY_LIMIT = 20  # artifacts list_artifacts shows (and instructions name) unless asked for another number
MAX_LIST_SUMMARY = 50  # the most artifacts list_artifacts shows
MAX_LOAD_IDS = 10  # ids one load_artifacts call may load
LOAD_TEXT_CHARS = 20_000  # characters of one text artifact load_artifacts puts into the context
LOAD_IMAGE_BYTES = 5 * 1024 * 1024  # the largest image load_artifacts loads
DEFAULT_OFFLOAD_TOKENS = 20_000  # a tool result estimated above this many tokens is offloaded to the vault
DEFAULT_PREVIEW_CHARS = 4_000  # characters of the preview an offloaded result is replaced by
MIN_PREVIEW_CHARS = 256
MAX_PREVIEW_CHARS = 200_000

# -- derived copies (refvault.vault.copies) ---------------------------------------------------
MAX_REDACT_BYTES = 256 * 1024 * 1024  # the largest artifact a redaction reads (it is held whole while redacted)
MAX_LINEAGE_NODES = 100_000  # the most nodes one lineage walk or cascade visits
MAX_REPLAY_IDS = 1000  # ids one replay_status call checks

# -- caps scaled to the model's context window (caps_for_model) --------------------------------
CHARS_PER_TOKEN = 4  # the estimate that turns a token share of the context into characters
MIN_MODEL_CONTEXT_TOKENS = 1_024  # the smallest model context caps are scaled for
MAX_MODEL_CONTEXT_TOKENS = 100_000_000  # the largest
_OFFLOAD_FLOOR, _OFFLOAD_CEILING = 256, MAX_CHARS // CHARS_PER_TOKEN  # tokens: 256 to 50,000
_PREVIEW_CEILING = 20_000  # characters: a tenth of the largest scaled offload threshold (50,000 tokens)
_WINDOW_FLOOR = 1_000  # characters: a window or loaded text of a scaled model shows at least this much
_ITEMS_FLOOR = 5  # grep matches and records per page a scaled model gets at least


@dataclass(frozen=True, slots=True)
class ModelCaps:
    """The per-result caps of one model: what a single tool result may put into its context.

    ``offload_tokens``: a tool result estimated above this many tokens is offloaded, replaced by a preview of
    at most ``preview_chars`` characters. The read tools' defaults, and the ceilings a larger value the model
    asks for is capped to: ``window_chars`` / ``max_window_chars`` (characters of a ``read_artifact`` window),
    ``grep_matches`` / ``max_grep_matches`` (its matches), ``query_limit`` / ``max_query_limit`` (records of a
    ``query_artifact`` page); ``load_text_chars`` (characters of each text ``load_artifacts`` loads).
    ``model_context_tokens`` is the context they were scaled for (None: the fixed defaults).

    Invariants: every default is at most its ceiling, every ceiling at most the hard limit of its read
    (:data:`MAX_CHARS`, :data:`MAX_MATCHES`, :data:`MAX_LIMIT`, :data:`MAX_PREVIEW_CHARS`).
    """

    model_context_tokens: int | None
    offload_tokens: int
    preview_chars: int
    window_chars: int
    max_window_chars: int
    grep_matches: int
    max_grep_matches: int
    query_limit: int
    max_query_limit: int
    load_text_chars: int


DEFAULT_CAPS = ModelCaps(
    model_context_tokens=None,
    offload_tokens=DEFAULT_OFFLOAD_TOKENS,
    preview_chars=DEFAULT_PREVIEW_CHARS,
    window_chars=DEFAULT_WINDOW_CHARS,
    max_window_chars=MAX_CHARS,
    grep_matches=DEFAULT_GREP_MATCHES,
    max_grep_matches=MAX_MATCHES,
    query_limit=DEFAULT_QUERY_LIMIT,
    max_query_limit=MAX_LIMIT,
    load_text_chars=LOAD_TEXT_CHARS,
)


def _clamp(value: int, floor: int, ceiling: int) -> int:
    return max(floor, min(value, ceiling))


def caps_for_model(model_context_tokens: int | None) -> ModelCaps:
    """The per-result caps for a model whose context window holds ``model_context_tokens`` tokens.

    None gives exactly the fixed defaults above (:data:`DEFAULT_OFFLOAD_TOKENS`, :data:`DEFAULT_PREVIEW_CHARS`,
    :data:`DEFAULT_WINDOW_CHARS` up to :data:`MAX_CHARS`, ...). Otherwise, with ``C`` the context in tokens
    and 4 characters a token, each cap is a share of ``C``, clamped between a usable floor and its hard limit:

    ==================  =============================  =========  ===========  ===========  ============
    cap                 formula                        8,192      32,768       131,072      1,048,576
    ==================  =============================  =========  ===========  ===========  ============
    offload_tokens      C/50 (2%), 256 to 50,000       256        655          2,621        20,971
    preview_chars       C/250 (0.1%), 256 to 20,000    256        256          524          4,194
    window_chars        C/50 (0.5% in chars), 1,000+   1,000      1,000        2,621        20,971
    max_window_chars    2C/5 (10% in chars)            3,276      13,107       52,428       200,000
    grep_matches        C/10,000, 5+                   5          5            13           104
    max_grep_matches    C/1,000                        8          32           131          1,000
    query_limit         C/10,000, 5+                   5          5            13           104
    max_query_limit     C/1,000                        8          32           131          1,000
    load_text_chars     as window_chars                1,000      1,000        2,621        20,971
    ==================  =============================  =========  ===========  ===========  ============

    Monotone in ``C``; each default at most its ceiling, each ceiling at most the hard limit (MAX_CHARS
    200,000, MAX_MATCHES 1,000, MAX_LIMIT 1,000, MAX_PREVIEW_CHARS 200,000); a preview is always shorter
    than the text it stands for (under the offload threshold's characters). A 1M-token model gets about
    today's fixed defaults; an 8k one about a twentieth of them. Raises :class:`~refvault.errors.InvalidArgument`
    unless ``model_context_tokens`` is None or an integer from :data:`MIN_MODEL_CONTEXT_TOKENS` (1,024) to
    :data:`MAX_MODEL_CONTEXT_TOKENS` (100,000,000).
    """
    if model_context_tokens is None:
        return DEFAULT_CAPS
    context = model_context_tokens
    if (
        not isinstance(context, int)
        or isinstance(context, bool)
        or not MIN_MODEL_CONTEXT_TOKENS <= context <= MAX_MODEL_CONTEXT_TOKENS
    ):
        raise InvalidArgument(
            "model_context_tokens must be the model's context window in tokens, an integer from "
            f"{MIN_MODEL_CONTEXT_TOKENS:,} to {MAX_MODEL_CONTEXT_TOKENS:,} (e.g. 128000), "
            "or None for the fixed defaults"
        )
    window = _clamp(context // 50, _WINDOW_FLOOR, MAX_CHARS)
    matches = _clamp(context // 10_000, _ITEMS_FLOOR, MAX_MATCHES)
    records = _clamp(context // 10_000, _ITEMS_FLOOR, MAX_LIMIT)
    return ModelCaps(
        model_context_tokens=context,
        offload_tokens=_clamp(context // 50, _OFFLOAD_FLOOR, _OFFLOAD_CEILING),
        preview_chars=_clamp(context // 250, MIN_PREVIEW_CHARS, _PREVIEW_CEILING),
        window_chars=window,
        max_window_chars=_clamp(2 * context // 5, window, MAX_CHARS),
        grep_matches=matches,
        max_grep_matches=_clamp(context // 1_000, matches, MAX_MATCHES),
        query_limit=records,
        max_query_limit=_clamp(context // 1_000, records, MAX_LIMIT),
        load_text_chars=window,
    )


def caps_with(caps: ModelCaps, *, offload_tokens: object = None, preview_chars: object = None) -> ModelCaps:
    """``caps`` with an explicitly given offload threshold and preview size (None: keep the scaled one).

    :class:`~refvault.errors.InvalidArgument` for a threshold that is not a positive integer, or a preview size
    outside :data:`MIN_PREVIEW_CHARS`..:data:`MAX_PREVIEW_CHARS`.
    """

    def positive(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    if offload_tokens is not None and not positive(offload_tokens):
        raise InvalidArgument("offload_tokens must be a positive integer")
    if preview_chars is not None and not (
        positive(preview_chars) and MIN_PREVIEW_CHARS <= preview_chars <= MAX_PREVIEW_CHARS  # type: ignore[operator]
    ):
        raise InvalidArgument(f"preview_chars must be an integer between {MIN_PREVIEW_CHARS} and {MAX_PREVIEW_CHARS:,}")
    given = {"offload_tokens": offload_tokens, "preview_chars": preview_chars}
    return replace(caps, **{key: value for key, value in given.items() if value is not None})  # type: ignore[arg-type]
