"""``RemoteLink``: a reference parameter of a tool that runs elsewhere, handed over as a capability link.

A tool whose function forwards its arguments to a remote endpoint (any HTTP tool, an MCP server over HTTP)
annotates a parameter ``RemoteLink``. The model sees and writes an artifact id, exactly as for a
:class:`~refvault.toolbox.ref.Ref`; the function receives a :class:`RemoteLink` (a URL that fetches the
artifact's verified bytes from ``refvault serve``, ``GET /v1/links/<token>``, without an API key) and passes
it on. Invariants (``tests/toolbox/test_remote_refs.py``):

* **One artifact, one call, one tool.** The Toolbox issues each link at dispatch, after the id resolved in the
  caller's scope, for exactly that artifact, recipient ``tool:<name>`` and the Toolbox's purpose, expiring at the
  tool's ``deadline``; it revokes every link of the call when the call ends (returned, raised or cancelled). A
  use after that is refused exactly like an absent artifact (the same 404).
* **No credential leaves.** The link is all the remote tool gets: no API key, no other artifact.
* **The model keeps seeing the id.** Schemas show a string id; events and the trajectory carry ids; a link the
  remote tool echoes back in its result is replaced by the artifact id before the model sees it.
* :class:`RemoteLink` shows its artifact id in ``repr`` (never the token); its URL is in :attr:`RemoteLink.url`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from refvault.toolbox.ref import REF_DESCRIPTION, REF_MARKER, Ref

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

__all__ = ["RemoteLink", "RemoteRef"]


class RemoteRef(Ref):
    """What a ``RemoteLink`` parameter holds between validation and dispatch: the id, resolved like a Ref.

    The Toolbox replaces it with a :class:`RemoteLink` before the tool runs.
    """

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RemoteLink:
    """A capability link to one artifact for one tool call: fetch ``url`` (no key) for the verified bytes.

    ``expires_at`` is when the link dies at the latest (it is revoked sooner, when the call ends);
    ``content_hash`` (``sha256:<hex>``), ``size`` and ``media_type`` let the remote side check what it fetched.
    """

    url: str = field(repr=False)
    artifact_id: str
    expires_at: datetime
    media_type: str
    size: int
    content_hash: str

    def as_json(self) -> dict[str, Any]:
        """The link as JSON-able data, for forwarding to a remote tool."""
        return {
            "url": self.url,
            "artifact_id": self.artifact_id,
            "expires_at": self.expires_at.isoformat(),
            "media_type": self.media_type,
            "size": self.size,
            "content_hash": self.content_hash,
        }

    def __str__(self) -> str:
        return self.artifact_id

    # -- pydantic: an artifact id string in schemas and JSON, a RemoteRef until dispatch ----------

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        from_str = core_schema.no_info_after_validator_function(RemoteRef, core_schema.str_schema())
        return core_schema.json_or_python_schema(
            json_schema=from_str,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(RemoteRef), from_str]),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.artifact_id, when_used="always"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string", "description": REF_DESCRIPTION, REF_MARKER: True}
