"""Issuing and revoking the capability links of a tool call's :class:`~refvault.toolbox.remote.RemoteLink`
parameters (the Toolbox's side of :mod:`refvault.toolbox.remote`).

:func:`issue_links` runs at dispatch, after the call's Refs resolved into its frame: one link per artifact, for
the tool's recipient and the frame's purpose, living the tool's ``deadline``. :func:`revoke_links` runs when the
call ends, however it ends. If issuing fails part way, what was issued is revoked before the error propagates.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydantic import BaseModel

from refvault.errors import InvalidArgument
from refvault.toolbox.definition import Tool
from refvault.toolbox.remote import RemoteLink, RemoteRef
from refvault.vault.links import DEFAULT_LINK_TTL, LINK_PATH, MAX_LINK_TTL, token_of

if TYPE_CHECKING:
    from refvault.model import Scope
    from refvault.toolbox.ref import DispatchFrame

__all__ = [
    "MAX_LINKS_PER_CALL",
    "check_links_possible",
    "checked_base_url",
    "checked_deadline",
    "issue_links",
    "revoke_links",
]

logger = logging.getLogger("refvault.toolbox")

MAX_LINKS_PER_CALL = 64
"""How many distinct artifacts one call of a tool with ``RemoteLink`` parameters may receive links to."""


class _Links(Protocol):
    """What a vault needs for ``RemoteLink`` parameters (a :class:`~refvault.Vault` and a ``Client`` are one)."""

    def link(
        self, scope: Scope, artifact_id: str, *, recipient: str, purpose: str = ..., expires_in: timedelta = ...
    ) -> str: ...
    def revoke_link(self, scope: Scope, link: str) -> bool: ...


def checked_base_url(value: object) -> str | None:
    """``link_base_url`` as given to a Toolbox: an http(s) URL without a trailing slash, or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InvalidArgument("link_base_url must be an http:// or https:// URL of refvault serve, or None")
    return value.rstrip("/")


def checked_deadline(deadline: object) -> None:
    """A tool's ``deadline``: None, or a timedelta a link may live (1 s to 24 h)."""
    if deadline is not None and (
        not isinstance(deadline, timedelta) or not timedelta(seconds=1) <= deadline <= MAX_LINK_TTL
    ):
        raise InvalidArgument("deadline must be a timedelta from 1 second to 24 hours, or None")


def check_links_possible(vault: object, base_url: str | None, tool: Tool) -> None:
    """Refuse, at registration, a tool whose links could never be issued (or a deadline without links)."""
    if not tool.takes_links:
        if tool.deadline is not None:
            raise InvalidArgument(f"tool {tool.name}: a deadline needs a RemoteLink parameter (it is the links' life)")
        return
    if not callable(getattr(vault, "link", None)) or not callable(getattr(vault, "revoke_link", None)):
        raise InvalidArgument(f"tool {tool.name}: RemoteLink parameters need a vault that issues and revokes links")
    if base_url is None and callable(getattr(vault, "embedded_vault", None)):
        raise InvalidArgument(
            f"tool {tool.name}: RemoteLink parameters over an embedded vault need Toolbox(link_base_url=...), "
            "the URL where `refvault serve` of this store answers"
        )


def issue_links(
    vault: object, base_url: str | None, tool: Tool, frame: DispatchFrame, kwargs: dict[str, Any], recipient: str
) -> tuple[RemoteLink, ...]:
    """Replace every RemoteRef in ``kwargs`` with a link issued for this call; return the links issued."""
    if not tool.takes_links:
        return ()
    issued: dict[str, RemoteLink] = {}
    links = cast("_Links", vault)
    ttl = tool.deadline or DEFAULT_LINK_TTL

    def issue(ref: RemoteRef) -> RemoteLink:
        artifact_id = ref.artifact_id
        if artifact_id not in issued:
            if len(issued) >= MAX_LINKS_PER_CALL:
                raise InvalidArgument(f"at most {MAX_LINKS_PER_CALL} artifacts per call of a remote tool")
            expires_at = datetime.now(UTC) + ttl
            link = links.link(frame.scope, artifact_id, recipient=recipient, purpose=frame.purpose, expires_in=ttl)
            url = link if base_url is None else base_url + LINK_PATH + str(token_of(link))
            if not url.startswith(("http://", "https://")):
                raise InvalidArgument("a remote tool's link needs Toolbox(link_base_url=...)")
            descriptor = frame.descriptor(artifact_id)
            issued[artifact_id] = RemoteLink(
                url, artifact_id, expires_at, descriptor.media_type, descriptor.size, descriptor.content_hash
            )
        return issued[artifact_id]

    try:
        for key in list(kwargs):
            kwargs[key] = _linked(kwargs[key], issue)
    except BaseException:
        revoke_links(vault, frame.scope, tuple(issued.values()))
        raise
    return tuple(issued.values())


def revoke_links(vault: object, scope: Scope, links: Sequence[RemoteLink]) -> None:
    """Revoke every link of a call that ended; a failure is logged (by type) and the link dies at its expiry."""
    for link in links:
        try:
            cast("_Links", vault).revoke_link(scope, link.url)
        except Exception as exc:
            logger.warning("revoking a link of %s failed: %s", link.artifact_id, type(exc).__name__)


def _linked(value: Any, issue: Callable[[RemoteRef], RemoteLink], depth: int = 0) -> Any:
    """``value`` with every RemoteRef (in lists, tuples, sets, dicts, models and dataclasses) a RemoteLink."""
    if isinstance(value, RemoteRef):
        return issue(value)
    if depth > 32 or isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_linked(item, issue, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(_linked(item, issue, depth + 1) for item in value)
    if isinstance(value, set | frozenset):
        return type(value)(_linked(item, issue, depth + 1) for item in value)
    if isinstance(value, dict):
        return {_linked(key, issue, depth + 1): _linked(item, issue, depth + 1) for key, item in value.items()}
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return value.model_copy(update={name: _linked(getattr(value, name), issue, depth + 1) for name in fields})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _linked(getattr(value, f.name), issue, depth + 1) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value
