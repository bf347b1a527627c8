"""Offloading oversized text out of a gateway result: the largest texts become previews of stored artifacts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp.types as types

from refvault.contract import VaultContract
from refvault.integrations.mcp.options import GatewayOptions
from refvault.integrations.mcp.results import URI_SHOWN, bounded, is_json_media_type, text_of, to_json
from refvault.model import Scope
from refvault.read.previews import estimate_tokens
from refvault.toolbox.offload import offload
from refvault.toolbox.taint import model_may_see

__all__ = ["ResultOffloader"]


@dataclass(frozen=True, slots=True)
class ResultOffloader:
    """Offloads the texts of one gateway's results to its vault, in its scope, as its options say."""

    vault: VaultContract
    scope: Scope
    options: GatewayOptions
    server_name: str

    def offload(self, result: types.CallToolResult, tool: str, tool_call_id: str) -> types.CallToolResult:
        """Offload the largest texts until the rest fit the threshold; offload oversized structured content.

        The texts are text blocks and embedded text resources; an offloaded text block keeps its block
        (its text becomes the preview), an offloaded embedded text resource becomes a text block holding
        the preview and the resource's URI and media type. ``structuredContent`` is offloaded when its
        JSON is estimated above the threshold or is longer than ``options.limits.structured_content``
        characters.

        Runs in a worker thread: estimates, JSON encoding and captures are CPU and disk work. The token
        estimate never exceeds two per character, which rules small results out cheaply.
        """
        threshold = self.options.caps.offload_tokens
        source = f"mcp:{self.server_name}/{tool}"
        labels = self.options.labels
        if labels and not model_may_see(self.vault, self.scope, labels, model=self.options.model, purpose="default"):
            return self._withhold(result, tool_call_id, source)
        content = list(result.content)
        texts = {i: text for i, block in enumerate(content) if (text := text_of(block)) is not None}
        changed = False
        if 2 * sum(len(text) for text in texts.values()) > threshold:
            estimates = {i: estimate_tokens(text) for i, text in texts.items()}
            total = sum(estimates.values())
            # Only texts longer than a preview are worth offloading: the preview replaces them.
            candidates = sorted(
                (i for i, text in texts.items() if len(text) > self.options.caps.preview_chars),
                key=lambda i: (-estimates[i], i),
            )
            for index in candidates:
                if total <= threshold:
                    break
                block = content[index]
                if isinstance(block, types.TextContent):
                    shown = self._capture(texts[index], texts[index], tool_call_id, source)
                    content[index] = block.model_copy(update={"text": shown})
                else:
                    assert isinstance(block, types.EmbeddedResource)
                    shown = self._capture_resource(block, tool_call_id, source)
                    content[index] = types.TextContent(
                        type="text", text=shown, annotations=block.annotations, _meta=block.meta
                    )
                total += estimate_tokens(shown) - estimates[index]
                changed = True
        structured = result.structured_content
        if structured is not None:
            try:
                encoded = to_json(structured)
            except (ValueError, TypeError, RecursionError):
                structured = {"refvault_omitted": "structuredContent omitted: it is not JSON-serialisable"}
                changed = True
            else:
                oversized = len(encoded) > self.options.limits.structured_content
                if oversized or (2 * len(encoded) > threshold and estimate_tokens(encoded) > threshold):
                    structured = json.loads(self._capture(encoded, structured, tool_call_id, source))
                    changed = True
        if not changed:
            return result
        return result.model_copy(update={"content": content, "structured_content": structured})

    def _withhold(self, result: types.CallToolResult, tool_call_id: str, source: str) -> types.CallToolResult:
        """Every text of a result whose labels the policy denies to the model, captured whatever its size.

        The model gets each one's descriptor and size, never its text (as a Toolbox does for a tainted
        result, :mod:`refvault.toolbox.taint`); binary parts were stored already, labelled.
        """
        content: list[types.ContentBlock] = []
        for block in result.content:
            if isinstance(block, types.TextContent):
                shown = self._capture(block.text, block.text, tool_call_id, source, withheld=True)
                content.append(block.model_copy(update={"text": shown}))
            elif isinstance(block, types.EmbeddedResource) and text_of(block) is not None:
                shown = self._capture_resource(block, tool_call_id, source, withheld=True)
                content.append(
                    types.TextContent(type="text", text=shown, annotations=block.annotations, _meta=block.meta)
                )
            else:
                content.append(block)
        structured = result.structured_content
        if structured is not None:
            try:
                encoded = to_json(structured)
            except (ValueError, TypeError, RecursionError):
                structured = {"refvault_omitted": "structuredContent omitted: it is not JSON-serialisable"}
            else:
                structured = json.loads(self._capture(encoded, structured, tool_call_id, source, withheld=True))
        return result.model_copy(update={"content": content, "structured_content": structured})

    def _capture_resource(
        self, block: types.EmbeddedResource, tool_call_id: str, source: str, *, withheld: bool = False
    ) -> str:
        """Offload an embedded text resource; the JSON shown instead names its URI and declared media type."""
        resource = block.resource
        assert isinstance(resource, types.TextResourceContents)
        value: Any = resource.text
        if resource.mime_type is not None and is_json_media_type(resource.mime_type):
            try:
                value = json.loads(resource.text)
            except (ValueError, RecursionError):
                value = resource.text  # declared JSON, but not: stored as text
        shown = json.loads(self._capture(resource.text, value, tool_call_id, source, withheld=withheld))
        shown["embedded_resource"] = {
            "uri": bounded(resource.uri, URI_SHOWN),
            "mimeType": bounded(resource.mime_type, URI_SHOWN) if resource.mime_type is not None else None,
        }
        return json.dumps(shown, ensure_ascii=False)

    def _capture(self, text: str, value: Any, tool_call_id: str, source: str, *, withheld: bool = False) -> str:
        """Offload one text (``value`` is what it renders); the JSON the model sees instead (``withheld``: its
        size, not a preview)."""
        shown, _ = offload(
            self.vault,
            self.scope,
            text,
            value,
            sealed=False,
            tool_call_id=tool_call_id,
            run_id=None,
            preview_chars=self.options.caps.preview_chars,
            source=source,
            labels=self.options.labels,
            withheld=withheld,
        )
        return shown
