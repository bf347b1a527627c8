"""Media types from magic numbers, and the policy for a declared type that disagrees with the bytes.

A tool result *declares* a media type (``mimeType``); the bytes *carry* one in
their first few bytes (a magic number). Neither is trusted blindly:

* :func:`sniff_media_type` names the format the bytes start with, or None.
* :func:`classify` compares the two and decides what the vault stores:

  ===========================================  ==========  =========================================
  declared / detected                          check       stored media type
  ===========================================  ==========  =========================================
  compatible (same format family)              match       the declared type (well-known aliases
                                                           such as ``image/jpg`` normalised)
  incompatible                                 mismatch    ``application/octet-stream``
  declared has a definitive signature, the     mismatch    ``application/octet-stream``
  bytes lack it (e.g. "image/png", no PNG
  header)
  bytes unrecognised, declared type has no     unknown     the declared type
  definitive signature
  nothing declared (or octet-stream)           unknown     the detected type, unless it is an
                                                           active type (below); else octet-stream
  an ``image`` block declaring a non-image     mismatch    ``application/octet-stream``
  type, an ``audio`` block a non-audio one
  ===========================================  ==========  =========================================

Every case records ``declared_media_type``, ``detected_media_type`` and
``media_type_check`` so a reader can see which was trusted and why (tested in
``tests/content/test_materialize.py`` and ``tests/content/test_types_and_names.py``).

Sniffing only ever *confirms or refuses* a declaration; it never promotes
opaque or undeclared bytes to an active type a client would render or run
(HTML, XHTML, SVG, XML, JavaScript: the content-sniffing attack ``nosniff``
exists to stop). Such bytes are stored as ``application/octet-stream`` with
the detected type recorded beside it.

:func:`name_for_type` keeps a filename's extension consistent with the stored
type, so a name cannot reintroduce a type the check refused to trust (an
``invoice.html`` stored as octet-stream becomes ``invoice.bin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from refvault.model import base_type

__all__ = ["ACTIVE_TYPES", "MediaTypeFacts", "classify", "extension_for", "name_for_type", "sniff_media_type"]

OCTET_STREAM = "application/octet-stream"
HEAD = 4096  # how many leading bytes sniffing looks at

# Types a client may render or execute: never chosen by sniffing alone.
ACTIVE_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "application/xml",
        "text/xml",
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "text/ecmascript",
    }
)

# The top-level type an MCP block kind promises ("image" blocks carry images, "audio" blocks audio).
_KIND_TYPES = {"image": "image/", "audio": "audio/"}

MediaTypeCheck = Literal["match", "mismatch", "unknown"]


# -- detection ------------------------------------------------------------------------------------------------------

_PREFIXES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"\xff\x0a", "image/jxl"),
    (b"\x00\x00\x00\x0cJXL \r\n\x87\n", "image/jxl"),
    (b"8BPS", "image/vnd.adobe.photoshop"),
    (b"fLaC", "audio/flac"),
    (b"OggS", "audio/ogg"),
    (b"ID3", "audio/mpeg"),
    (b"MThd", "audio/midi"),
    (b"#!AMR", "audio/amr"),
    (b"PK\x03\x04", "application/zip"),
    (b"PK\x05\x06", "application/zip"),
    (b"PK\x07\x08", "application/zip"),
    (b"\x1f\x8b\x08", "application/gzip"),
    (b"\xfd7zXZ\x00", "application/x-xz"),
    (b"\x28\xb5\x2f\xfd", "application/zstd"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"\x00asm", "application/wasm"),
    (b"wOFF", "font/woff"),
    (b"wOF2", "font/woff2"),
    (b"OTTO", "font/otf"),
    (b"\x00\x01\x00\x00\x00", "font/ttf"),
)

_RIFF_FORMS = {b"WEBP": "image/webp", b"WAVE": "audio/wav", b"AVI ": "video/x-msvideo"}
_FORM_TYPES = {b"AIFF": "audio/aiff", b"AIFC": "audio/aiff"}
_BMP_HEADER_SIZES = frozenset({12, 40, 52, 56, 64, 108, 124})

_FTYP_BRANDS = {
    b"M4A ": "audio/mp4",
    b"M4B ": "audio/mp4",
    b"M4P ": "audio/mp4",
    b"F4A ": "audio/mp4",
    b"qt  ": "video/quicktime",
    b"avif": "image/avif",
    b"avis": "image/avif",
    b"mif1": "image/heif",
    b"msf1": "image/heif",
    b"heic": "image/heic",
    b"heix": "image/heic",
    b"hevc": "image/heic",
    b"hevx": "image/heic",
    b"heim": "image/heic",
    b"heis": "image/heic",
}


def sniff_media_type(data: bytes | bytearray | memoryview) -> str | None:
    """The media type the bytes' magic number names, or None if unrecognised.

    Looks at the first 4 KiB only; never decodes or executes anything.
    """
    head = bytes(data[:HEAD])
    for prefix, media_type in _PREFIXES:
        if head.startswith(prefix):
            return media_type
    return _container(head) or _framed_audio(head) or _loose(head) or _markup(head)


def _container(head: bytes) -> str | None:
    """Formats named by a chunk or box header: RIFF, IFF, ISO BMFF (ftyp), EBML, BMP, ICO, tar, PDF."""
    if head[:4] == b"RIFF" and len(head) >= 12:
        return _RIFF_FORMS.get(head[8:12])
    if head[:4] == b"FORM" and len(head) >= 12:
        return _FORM_TYPES.get(head[8:12])
    if head[4:8] == b"ftyp" and len(head) >= 12:
        brand = head[8:12]
        if brand.startswith(b"3g2"):
            return "video/3gpp2"
        if brand.startswith(b"3gp"):
            return "video/3gpp"
        return _FTYP_BRANDS.get(brand, "video/mp4")
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "video/webm" if b"webm" in head[:64] else "video/x-matroska"
    if head[:2] == b"BM" and len(head) >= 18 and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return "image/bmp"
    if head[:4] == b"\x00\x00\x01\x00" and len(head) >= 6 and int.from_bytes(head[4:6], "little") > 0:
        return "image/vnd.microsoft.icon"
    if head[257:262] == b"ustar":
        return "application/x-tar"
    if b"%PDF-" in head[:1024]:  # readers accept leading junk before the header
        return "application/pdf"
    return None


def _framed_audio(head: bytes) -> str | None:
    """MPEG audio (MP3) frame sync, or an AAC ADTS header."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    version = (head[1] >> 3) & 0b11
    layer = (head[1] >> 1) & 0b11
    if layer == 0:  # "layer" 00 with the 12-bit sync is AAC's ADTS header
        return "audio/aac" if head[1] & 0xF0 == 0xF0 else None
    bitrate = head[2] >> 4
    sample_rate = (head[2] >> 2) & 0b11
    if version == 0b01 or bitrate in (0, 0xF) or sample_rate == 0b11:
        return None
    return "audio/mpeg"


def _loose(head: bytes) -> str | None:
    """Short signatures that need one more byte of evidence."""
    if head[:3] == b"BZh" and len(head) >= 4 and head[3:4].isdigit() and head[3:4] != b"0":
        return "application/x-bzip2"
    if head[:4] == b"ADIF":
        return "audio/aac"
    return None


def _markup(head: bytes) -> str | None:
    """SVG, XML and HTML, recognised from their opening (after a BOM and whitespace)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n").lower()
    if text.startswith((b"<svg", b"<!doctype svg")):
        return "image/svg+xml"
    if text.startswith(b"<?xml"):
        return "image/svg+xml" if b"<svg" in text else "application/xml"
    if text.startswith((b"<!doctype html", b"<html")):
        return "text/html"
    return None


# -- families, aliases and the policy -------------------------------------------------------------------------------

# Declared types compatible with each detected type (base types, canonical lowercase).
_FAMILIES: dict[str, frozenset[str]] = {
    "image/png": frozenset({"image/png", "image/apng", "image/vnd.mozilla.apng"}),
    "image/jpeg": frozenset({"image/jpeg", "image/jpg", "image/pjpeg"}),
    "image/gif": frozenset({"image/gif"}),
    "image/webp": frozenset({"image/webp"}),
    "image/bmp": frozenset({"image/bmp", "image/x-bmp", "image/x-ms-bmp"}),
    "image/tiff": frozenset({"image/tiff", "image/tiff-fx"}),
    "image/vnd.microsoft.icon": frozenset({"image/vnd.microsoft.icon", "image/x-icon", "image/ico", "image/icon"}),
    "image/jxl": frozenset({"image/jxl"}),
    "image/avif": frozenset({"image/avif"}),
    "image/heic": frozenset({"image/heic", "image/heif", "image/heic-sequence", "image/heif-sequence"}),
    "image/heif": frozenset({"image/heic", "image/heif", "image/heic-sequence", "image/heif-sequence"}),
    "image/svg+xml": frozenset({"image/svg+xml", "application/xml", "text/xml"}),
    "image/vnd.adobe.photoshop": frozenset({"image/vnd.adobe.photoshop", "image/x-photoshop", "image/psd"}),
    "application/pdf": frozenset({"application/pdf", "application/x-pdf"}),
    "audio/wav": frozenset({"audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave", "audio/x-pn-wav"}),
    "audio/mpeg": frozenset({"audio/mpeg", "audio/mp3", "audio/x-mp3", "audio/mpeg3", "audio/x-mpeg", "audio/mpa"}),
    "audio/aac": frozenset({"audio/aac", "audio/x-aac", "audio/aacp"}),
    "audio/ogg": frozenset({"audio/ogg", "video/ogg", "application/ogg", "audio/opus", "audio/vorbis", "audio/x-ogg"}),
    "audio/flac": frozenset({"audio/flac", "audio/x-flac"}),
    "audio/aiff": frozenset({"audio/aiff", "audio/x-aiff"}),
    "audio/midi": frozenset({"audio/midi", "audio/x-midi", "audio/mid"}),
    "audio/amr": frozenset({"audio/amr"}),
    "audio/mp4": frozenset({"audio/mp4", "audio/m4a", "audio/x-m4a", "video/mp4", "application/mp4"}),
    "video/mp4": frozenset(
        {"video/mp4", "audio/mp4", "audio/m4a", "audio/x-m4a", "video/x-m4v", "application/mp4", "video/quicktime"}
    ),
    "video/quicktime": frozenset({"video/quicktime", "video/mp4"}),
    "video/3gpp": frozenset({"video/3gpp", "audio/3gpp", "video/mp4"}),
    "video/3gpp2": frozenset({"video/3gpp2", "audio/3gpp2", "video/mp4"}),
    "video/webm": frozenset({"video/webm", "audio/webm", "video/x-matroska", "audio/x-matroska"}),
    "video/x-matroska": frozenset({"video/webm", "audio/webm", "video/x-matroska", "audio/x-matroska"}),
    "video/x-msvideo": frozenset({"video/x-msvideo", "video/avi", "video/msvideo"}),
    "application/zip": frozenset(
        {
            "application/zip",
            "application/x-zip",
            "application/x-zip-compressed",
            "application/java-archive",
            "application/vnd.android.package-archive",
        }
    ),
    "application/gzip": frozenset({"application/gzip", "application/x-gzip"}),
    "application/x-bzip2": frozenset({"application/x-bzip2", "application/x-bzip"}),
    "application/x-xz": frozenset({"application/x-xz"}),
    "application/zstd": frozenset({"application/zstd"}),
    "application/x-7z-compressed": frozenset({"application/x-7z-compressed"}),
    "application/x-tar": frozenset({"application/x-tar"}),
    "application/wasm": frozenset({"application/wasm"}),
    "application/xml": frozenset({"application/xml", "text/xml"}),
    "text/html": frozenset({"text/html", "application/xhtml+xml"}),
    "font/woff": frozenset({"font/woff", "application/font-woff"}),
    "font/woff2": frozenset({"font/woff2"}),
    "font/otf": frozenset({"font/otf", "font/sfnt", "application/x-font-otf"}),
    "font/ttf": frozenset({"font/ttf", "font/sfnt", "application/x-font-ttf", "application/font-sfnt"}),
}

# Container formats that whole families of declared types are built on.
_FAMILY_PREFIXES: dict[str, tuple[str, ...]] = {
    "application/zip": ("application/vnd.openxmlformats-officedocument.", "application/vnd.oasis.opendocument."),
}
_FAMILY_SUFFIXES: dict[str, tuple[str, ...]] = {
    "application/zip": ("+zip",),
    "application/gzip": ("+gzip",),
    "application/xml": ("+xml",),
    "image/svg+xml": ("+xml",),
}

# Formats whose files always begin with their signature: declared, but the bytes lack it, is a mismatch.
_DEFINITIVE = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/bmp",
        "image/tiff",
        "image/jxl",
        "image/vnd.adobe.photoshop",
        "application/pdf",
        "audio/wav",
        "audio/flac",
        "audio/ogg",
        "audio/aiff",
        "audio/midi",
        "video/webm",
        "video/x-matroska",
        "video/x-msvideo",
        "application/zip",
        "application/gzip",
        "application/x-bzip2",
        "application/x-xz",
        "application/zstd",
        "application/x-7z-compressed",
        "application/wasm",
        "font/woff",
        "font/woff2",
    }
)

# Common unregistered spellings and their registered names (the base type only; parameters are kept).
_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "image/x-icon": "image/vnd.microsoft.icon",
    "image/ico": "image/vnd.microsoft.icon",
    "image/icon": "image/vnd.microsoft.icon",
    "image/x-bmp": "image/bmp",
    "image/x-ms-bmp": "image/bmp",
    "image/x-photoshop": "image/vnd.adobe.photoshop",
    "image/psd": "image/vnd.adobe.photoshop",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-pn-wav": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/x-mp3": "audio/mpeg",
    "audio/mpeg3": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/x-flac": "audio/flac",
    "audio/x-aac": "audio/aac",
    "audio/x-aiff": "audio/aiff",
    "audio/x-midi": "audio/midi",
    "audio/mid": "audio/midi",
    "audio/m4a": "audio/mp4",
    "audio/x-m4a": "audio/mp4",
    "audio/x-ogg": "audio/ogg",
    "video/avi": "video/x-msvideo",
    "video/msvideo": "video/x-msvideo",
    "application/x-pdf": "application/pdf",
    "application/x-gzip": "application/gzip",
    "application/x-zip": "application/zip",
    "application/x-zip-compressed": "application/zip",
    "application/x-bzip": "application/x-bzip2",
    "application/font-woff": "font/woff",
}

_EXTENSIONS = {
    "image/png": "png",
    "image/apng": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
    "image/vnd.microsoft.icon": "ico",
    "image/jxl": "jxl",
    "image/avif": "avif",
    "image/heic": "heic",
    "image/heif": "heif",
    "image/svg+xml": "svg",
    "image/vnd.adobe.photoshop": "psd",
    "application/pdf": "pdf",
    "audio/wav": "wav",
    "audio/mpeg": "mp3",
    "audio/aac": "aac",
    "audio/ogg": "ogg",
    "audio/opus": "opus",
    "audio/flac": "flac",
    "audio/aiff": "aiff",
    "audio/midi": "mid",
    "audio/amr": "amr",
    "audio/mp4": "m4a",
    "audio/webm": "weba",
    "video/mp4": "mp4",
    "video/quicktime": "mov",
    "video/3gpp": "3gp",
    "video/3gpp2": "3g2",
    "video/webm": "webm",
    "video/x-matroska": "mkv",
    "video/x-msvideo": "avi",
    "video/ogg": "ogv",
    "application/zip": "zip",
    "application/gzip": "gz",
    "application/x-bzip2": "bz2",
    "application/x-xz": "xz",
    "application/zstd": "zst",
    "application/x-7z-compressed": "7z",
    "application/x-tar": "tar",
    "application/wasm": "wasm",
    "application/xml": "xml",
    "application/json": "json",
    "application/x-ndjson": "ndjson",
    "application/yaml": "yaml",
    "application/msword": "doc",
    "application/vnd.ms-excel": "xls",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.oasis.opendocument.text": "odt",
    "application/vnd.oasis.opendocument.spreadsheet": "ods",
    "application/vnd.oasis.opendocument.presentation": "odp",
    "application/epub+zip": "epub",
    "application/java-archive": "jar",
    "application/vnd.android.package-archive": "apk",
    "application/rtf": "rtf",
    "application/octet-stream": "bin",
    "text/html": "html",
    "application/xhtml+xml": "xhtml",
    "text/markdown": "md",
    "text/css": "css",
    "text/javascript": "js",
    "application/javascript": "js",
    "text/xml": "xml",
    "text/plain": "txt",
    "text/csv": "csv",
    "font/woff": "woff",
    "font/woff2": "woff2",
    "font/otf": "otf",
    "font/ttf": "ttf",
}


@dataclass(frozen=True, slots=True)
class MediaTypeFacts:
    """What was declared, what the bytes carry, how they compare, and what is stored."""

    stored: str
    declared: str | None
    detected: str | None
    check: MediaTypeCheck

    def as_json(self) -> dict[str, str | None]:
        return {
            "declared_media_type": self.declared,
            "detected_media_type": self.detected,
            "media_type_check": self.check,
        }


def compatible(declared: str, detected: str) -> bool:
    """True if a declared (canonical) type names the format detected in the bytes."""
    base = base_type(declared)
    if base == detected or base in _FAMILIES.get(detected, ()):
        return True
    return base.startswith(_FAMILY_PREFIXES.get(detected, ())) or base.endswith(_FAMILY_SUFFIXES.get(detected, ()))


def _has_definitive_signature(declared: str) -> bool:
    base = _ALIASES.get(base_type(declared), base_type(declared))
    return base in _DEFINITIVE or any(compatible(base, family) for family in ("application/zip", "application/gzip"))


def _unaliased(declared: str) -> str:
    base, sep, params = declared.partition(";")
    registered = _ALIASES.get(base.strip())
    return declared if registered is None else registered + sep + params


def classify(declared: str | None, data: bytes | bytearray | memoryview, kind: str | None = None) -> MediaTypeFacts:
    """Decide the stored media type of ``data`` declared as ``declared`` (canonical, or None).

    ``kind`` is the MCP block kind (``image``, ``audio``, ``resource``): an
    ``image`` block must declare an ``image/*`` type and an ``audio`` block an
    ``audio/*`` one, else the declaration is a mismatch. See the module
    docstring for the table this implements.
    """
    detected = sniff_media_type(data)
    required = _KIND_TYPES.get(kind or "")
    if required is not None and declared is not None and not base_type(declared).startswith(required):
        return MediaTypeFacts(OCTET_STREAM, declared, detected, "mismatch")
    if declared is None or base_type(declared) == OCTET_STREAM:
        promoted = detected if detected is not None and detected not in ACTIVE_TYPES else OCTET_STREAM
        return MediaTypeFacts(promoted, declared, detected, "unknown")
    if detected is None:
        if _has_definitive_signature(declared):
            return MediaTypeFacts(OCTET_STREAM, declared, None, "mismatch")
        return MediaTypeFacts(_unaliased(declared), declared, None, "unknown")
    if compatible(declared, detected):
        return MediaTypeFacts(_unaliased(declared), declared, detected, "match")
    return MediaTypeFacts(OCTET_STREAM, declared, detected, "mismatch")


def extension_for(media_type: str) -> str:
    """A file extension (without the dot) for a stored media type; ``bin`` when none is known."""
    base = base_type(media_type)
    if base in _EXTENSIONS:
        return _EXTENSIONS[base]
    for suffix, ext in (("+json", "json"), ("+xml", "xml"), ("+zip", "zip")):
        if base.endswith(suffix):
            return ext
    return "bin"


# Other spellings of the extensions above (lowercase, without the dot).
_EXTENSION_ALIASES = {
    "jpeg": "jpg",
    "jpe": "jpg",
    "jfif": "jpg",
    "tif": "tiff",
    "htm": "html",
    "midi": "mid",
    "aif": "aiff",
    "aifc": "aiff",
    "oga": "ogg",
    "tgz": "gz",
    "gzip": "gz",
    "yml": "yaml",
    "markdown": "md",
}


def name_for_type(name: str, media_type: str) -> str:
    """``name`` with an extension consistent with the stored ``media_type``.

    A name without an extension is kept; an extension that names another type
    (or any extension, when the type has none we know) is replaced by the
    stored type's (``bin`` for ``application/octet-stream``).
    """
    stem, dot, ext = name.rpartition(".")
    if not dot:
        return name
    wanted = extension_for(media_type)
    if stem and _EXTENSION_ALIASES.get(ext.lower(), ext.lower()) == wanted:
        return name
    return f"{stem or name}.{wanted}"
