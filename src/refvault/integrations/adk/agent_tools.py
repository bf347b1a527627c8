"""Toolbox tools as ADK tools: declared from ``box.schemas("gemini")``, dispatched by ``box.call``."""

from __future__ import annotations

import base64
import binascii
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from google.adk.tools.base_tool import BaseTool
from google.genai import types

from refvault.errors import InvalidArgument
from refvault.integrations.adapter import tool_schemas
from refvault.integrations.adk.identity import scope_for
from refvault.model import Scope
from refvault.toolbox.values import DATA_ONLY

if TYPE_CHECKING:
    from google.adk.tools.tool_context import ToolContext

    from refvault.toolbox.toolbox import Observation, Toolbox

__all__ = ["RefvaultTool", "tools"]


class RefvaultTool(BaseTool):
    """One Toolbox tool as an ADK tool: declared from ``box.schemas("gemini")``, dispatched by ``box.call``."""

    def __init__(
        self,
        box: Toolbox,
        schema: Mapping[str, Any],
        *,
        scope: Scope | None = None,
        model_context_tokens: int | None = None,
    ) -> None:
        super().__init__(name=str(schema["name"]), description=str(schema.get("description") or ""))
        self.box = box
        self.scope = scope
        self.model_context_tokens = model_context_tokens
        self._declaration = types.FunctionDeclaration.model_validate(dict(schema))

    def _get_declaration(self) -> types.FunctionDeclaration | None:
        return self._declaration.model_copy(deep=True)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        session = tool_context.session
        scope = self.scope or scope_for(session.app_name, session.user_id, session.id)
        observation = await self.box.call(
            self.name,
            args,
            scope=scope,
            run_id=tool_context.invocation_id,
            tool_call_id=tool_context.function_call_id,
            model_context_tokens=self.model_context_tokens,
        )
        return _result(observation)


def _result(observation: Observation) -> dict[str, Any]:
    """What ADK turns into the function response: the text, and load_artifacts' images as media parts."""
    if observation.is_error:
        return {"error": observation.content}
    result: dict[str, Any] = {"result": observation.content}
    if observation.parts:
        result["content"] = [_part(part) for part in observation.parts]
    if observation.data_only:  # recovered content: data, never instructions
        result[DATA_ONLY] = True
    return result


def _part(part: Mapping[str, Any]) -> str | types.Part:
    """A text part as a string; an image as a Part with inline bytes (ADK sends it as function-response media)."""
    if part.get("type") == "image":
        try:
            data = base64.b64decode(str(part["data"]), validate=True)
        except (binascii.Error, ValueError):
            return "[an image part could not be decoded]"
        return types.Part(inline_data=types.Blob(mime_type=str(part["media_type"]), data=data))
    return str(part.get("text", ""))


def tools(
    box: Toolbox,
    *positional: Iterable[str] | None,
    scope: Scope | None = None,
    names: Iterable[str] | None = None,
    model_context_tokens: int | None = None,
) -> list[BaseTool]:
    """The Toolbox's tools (all, or those in ``names``, in that order) as ADK tools: every adapter's shape.

    Each call runs in ``scope`` if given, else in the scope of the ADK session that makes it
    (:func:`scope_for`). Refvault's ``load_artifacts`` shares its name with ADK's ``LoadArtifactsTool``:
    to use ADK's, leave refvault's out with ``names``. ``tools(box, names)`` (the names given by
    position) still works and warns: it is deprecated for ``tools(box, names=...)``.
    ``model_context_tokens`` (the agent's model's context window) scales every call's caps to it
    (:mod:`refvault.integrations.adapter`).
    """
    if positional:
        if len(positional) > 1 or names is not None:
            raise InvalidArgument("give the tool names once, as names=[...]")
        warnings.warn(
            "tools(box, names) is deprecated: pass tools(box, names=...), the shape of every refvault adapter",
            DeprecationWarning,
            stacklevel=2,
        )
        names = positional[0]
    schemas = tool_schemas(
        box,
        "gemini",
        scope=scope,
        names=names,
        scope_optional=True,
        in_given_order=True,
        model_context_tokens=model_context_tokens,
    )
    return [RefvaultTool(box, schema, scope=scope, model_context_tokens=model_context_tokens) for schema in schemas]
