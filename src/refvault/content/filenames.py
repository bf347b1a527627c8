"""Filenames and source URIs of stored parts, from the upstream URIs a tool result names.

A display name keeps only a cleaned basename; a recorded source URI keeps scheme, host and path.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote, urlsplit, urlunsplit

from refvault.content.result_parts import FILENAME_MAX, SOURCE_URI_MAX

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_WINDOWS_FORBIDDEN = re.compile(r'[<>:"|?*]')
_WINDOWS_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{device}{n}" for device in ("COM", "LPT") for n in [*"0123456789", "\u00b9", "\u00b2", "\u00b3"]}
)


def safe_filename(uri: object) -> str | None:
    """A display filename from an upstream URI: the basename only, cleaned and capped; None if there is none.

    Query and fragment are dropped; percent-escapes are decoded before cleaning;
    control, format and private-use characters are removed; characters Windows
    forbids (``<>:"|?*``, ``:`` being its stream separator) become ``_``;
    trailing dots and spaces are removed; ``.``, ``..`` and Windows device names
    (``CON``, ``nul.png``, ``COM1.txt``...) are refused; at most 128 characters
    are kept, with the extension. Opaque URIs (``urn:``, ``data:``, ``mailto:``)
    name no file.
    """
    if not isinstance(uri, str) or not uri or len(uri) > SOURCE_URI_MAX:
        return None
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme and not parts.netloc and not parts.path.startswith("/"):
        return None  # opaque: urn:isbn:..., data:..., mailto:...
    path = unquote(parts.path, errors="replace")
    base = re.split(r"[/\\]", path)[-1]
    cleaned = "".join(ch for ch in base if unicodedata.category(ch) not in _UNSAFE_CATEGORIES)
    cleaned = _WINDOWS_FORBIDDEN.sub("_", unicodedata.normalize("NFC", cleaned)).strip().rstrip(". ")
    if not cleaned or cleaned.split(".")[0].rstrip(" ").upper() in _WINDOWS_DEVICES:
        return None
    return capped_filename(cleaned)


def capped_filename(name: str) -> str:
    if len(name) <= FILENAME_MAX:
        return name
    stem, dot, ext = name.rpartition(".")
    if dot and stem and 0 < len(ext) <= 16:
        return stem[: FILENAME_MAX - len(ext) - 1] + "." + ext
    return name[:FILENAME_MAX]


def recorded_source_uri(uri: object) -> str | None:
    """What is recorded of an upstream URI: scheme, host and path only (no user, query or fragment).

    ``data:`` URIs are never recorded (they are the bytes themselves), nor are
    URIs over 2048 characters.
    """
    if not isinstance(uri, str) or not uri or len(uri) > SOURCE_URI_MAX:
        return None
    try:
        parts = urlsplit(uri.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme == "data":
        return None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    kept = urlunsplit((scheme, netloc, parts.path, "", ""))
    kept = "".join(ch for ch in kept if unicodedata.category(ch) not in _UNSAFE_CATEGORIES)
    return kept or None
