"""How the gateway treats results (:class:`GatewayOptions`): offload threshold, previews, limits, disclosure, labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from refvault.content import Limits
from refvault.errors import InvalidArgument, InvalidMetadata
from refvault.limits import ModelCaps, caps_for_model, caps_with
from refvault.mcp_tools import MAX_RESOURCE_BYTES
from refvault.model import check_labels
from refvault.policy import check_recipient

__all__ = ["GatewayOptions"]


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """How the gateway treats results: offload threshold, preview size, limits, disclosure of binary parts.

    ``limits.per_part`` and ``limits.per_result`` go to ``materialize``; ``limits.structured_content``
    is the gateway's own bound on the ``structuredContent`` shown (over it, the value is offloaded).

    ``model_context_tokens`` (the served model's context window, in tokens) scales the offload threshold,
    the preview size and refvault's read tools' caps to the model (:func:`refvault.limits.caps_for_model`);
    ``offload_tokens`` and ``preview_chars``, when given, win over the scaled values. :attr:`caps` is
    what applies (with neither given: the fixed defaults, 20,000 tokens and 4,000 characters).
    """

    offload_tokens: int | None = None  # None: scaled to model_context_tokens, else the fixed default
    preview_chars: int | None = None  # None: scaled to model_context_tokens, else the fixed default
    limits: Limits = field(default_factory=Limits)
    binary_disclosure: Literal["model", "sealed"] = "sealed"
    max_resource_bytes: int = MAX_RESOURCE_BYTES
    server_name: str | None = None  # the upstream's name in provenance; None: what it reports about itself
    labels: frozenset[str] = frozenset()  # put on every part stored from this upstream's results (offloaded too)
    model: str | None = None  # the model refvault's own tools read for; None: the MCP client's declared name
    model_context_tokens: int | None = None  # the served model's context window; None: the fixed defaults
    caps: ModelCaps = field(init=False, repr=False, compare=False)  # what applies: scaled, given values kept

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "labels", check_labels(self.labels))
        except InvalidMetadata as exc:
            raise InvalidArgument(str(exc)) from None
        if self.model is not None:
            check_recipient("model:" + self.model if isinstance(self.model, str) else None)
        caps = caps_for_model(self.model_context_tokens)  # a bad size: InvalidArgument, saying what is accepted
        caps = caps_with(caps, offload_tokens=self.offload_tokens, preview_chars=self.preview_chars)
        object.__setattr__(self, "caps", caps)
        if self.binary_disclosure not in ("model", "sealed"):
            raise InvalidArgument("binary_disclosure must be 'model' or 'sealed'")
        if not _positive(self.max_resource_bytes):
            raise InvalidArgument("max_resource_bytes must be a positive integer")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
