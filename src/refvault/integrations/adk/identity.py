"""ADK's names as refvault scopes: one injective mapping, shared by the artifact service and the tools.

:func:`scope_name` maps one ADK name (an app name, a user id, a session id) to
a refvault scope name and :func:`scope_for` maps an ADK session to a
:class:`~refvault.model.Scope` (the forms, and why no two names share one,
are in :mod:`refvault.integrations.adk`). :func:`place_of` mirrors ADK's
``_artifact_path`` checks and says where the versions of one filename live;
a ``user:`` filename lives in the reserved session :data:`USER_SESSION`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from google.adk.artifacts import artifact_util
from google.adk.errors.input_validation_error import InputValidationError

from refvault.errors import InvalidArgument, InvalidScope
from refvault.ids import check_name
from refvault.model import Scope

__all__ = [
    "RESERVED_PREFIX",
    "USER_PREFIX",
    "USER_SESSION",
    "AdkInputError",
    "Place",
    "is_user",
    "place_of",
    "scope_for",
    "scope_name",
    "segment",
]

USER_SESSION = "user"  # the session that holds a user's "user:" artifacts (ADK reserves this session id)
USER_PREFIX = "user:"


class AdkInputError(InvalidArgument, InputValidationError):
    """Input ADK's own artifact services refuse: both refvault's InvalidArgument and ADK's InputValidationError."""


# -- identity ---------------------------------------------------------------------------------------------------


def segment(value: object, field: str) -> str:
    """ADK's path-segment rule (its own validator), with a message that does not echo the value."""
    if not isinstance(value, str):
        raise AdkInputError(f"{field} must be a string")
    try:
        artifact_util.validate_path_segment(value, field)
    except InputValidationError:
        raise AdkInputError(
            f"{field} is not a valid ADK name: it must be non-empty, without NUL, a leading slash, "
            "a drive letter, '..' segments or reserved path segments"
        ) from None
    return value


RESERVED_PREFIX = "_adk+"  # no name passes through unchanged with it; every encoded name has it
_ESCAPED = RESERVED_PREFIX + "e:"
_HASHED = RESERVED_PREFIX + "h:"
_KEPT = re.compile(r"[A-Za-z0-9._:@-]")  # characters the escape keeps as they are ("+" is the escape)
_MAX_NAME = 128


def scope_name(name: str) -> str:
    """The refvault scope name of one ADK name (an app name, a user id or a session id); injective.

    See the module docstring for the three forms and why no two names share one
    (``tests/security/test_adk_names.py``). Total on strings: lone surrogates are
    encoded as such (``surrogatepass``).
    """
    if not isinstance(name, str):
        raise AdkInputError("ADK names are strings")
    if not name.startswith(RESERVED_PREFIX):
        try:
            return check_name("name", name)
        except InvalidScope:
            pass
    escaped = "".join(
        char if _KEPT.fullmatch(char) else "".join(f"+{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        for char in name
    )
    if len(_ESCAPED) + len(escaped) <= _MAX_NAME:
        return _ESCAPED + escaped
    return _HASHED + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def scope_for(app_name: str, user_id: str, session_id: str) -> Scope:
    """The refvault scope of an ADK session: each of the three names through :func:`scope_name`.

    The one mapping the artifact service and the tools share. Names that are already
    refvault scope names (and do not start with ``_adk+``) are used unchanged; any
    other name is encoded; no two ADK triples share a scope (:func:`scope_name`).
    """
    return Scope(scope_name(app_name), scope_name(user_id), scope_name(session_id))


@dataclass(frozen=True, slots=True)
class Place:
    """Where the versions of one ADK filename live."""

    scope: Scope
    filename: str


def is_user(filename: str) -> bool:
    return filename.startswith(USER_PREFIX)


def place_of(app_name: str, user_id: str, filename: str, session_id: str | None) -> Place:
    """Mirror of ADK's ``_artifact_path``: the same checks, in the same order."""
    segment(app_name, "app_name")
    segment(user_id, "user_id")
    if not isinstance(filename, str):
        raise AdkInputError("filename must be a string")
    if is_user(filename):
        return Place(scope_for(app_name, user_id, USER_SESSION), filename)
    if session_id is None:
        raise AdkInputError("Session ID must be provided for session-scoped artifacts.")
    segment(session_id, "session_id")
    return Place(scope_for(app_name, user_id, session_id), filename)
