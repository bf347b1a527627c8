"""Tool definitions for model APIs: one :class:`~refvault.toolbox.definition.Tool` in each API's shape.

:func:`tool_schema` renders a tool for ``openai`` (optionally strict),
``anthropic``, ``gemini`` or ``mcp``; every ``Ref`` parameter is a string
(:func:`refvault.toolbox.ref.finish_ref_schemas`). :func:`gemini_schema`
rewrites a JSON schema into the OpenAPI subset Gemini accepts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from refvault.errors import InvalidArgument
from refvault.toolbox.definition import Tool
from refvault.toolbox.ref import finish_ref_schemas

__all__ = ["Flavor", "gemini_schema", "parameters_schema", "strict_expressible", "tool_schema", "untitled"]

Flavor = Literal["openai", "anthropic", "gemini", "mcp"]


def parameters_schema(tool: Tool, *, strict: bool, ref_pattern: bool) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (``strict``: the ``openai`` package's strict-mode conversion)."""
    if strict:
        from openai.lib._pydantic import to_strict_json_schema

        parameters = to_strict_json_schema(tool.arguments)
    else:
        parameters = tool.arguments.model_json_schema()
    return dict(finish_ref_schemas(untitled(parameters), pattern=ref_pattern))


def tool_schema(tool: Tool, flavor: Flavor, *, strict: bool, ref_pattern: bool) -> dict[str, Any]:
    """The definition of ``tool`` for the model API ``flavor``."""
    requested = strict
    parameters = parameters_schema(tool, strict=False, ref_pattern=ref_pattern)
    if strict:
        strict_parameters = parameters_schema(tool, strict=True, ref_pattern=ref_pattern)
        # OpenAI strict mode needs additionalProperties false on every object, so a
        # free-form mapping (dict[str, ...]) cannot be strict: that tool stays non-strict.
        strict = strict_expressible(strict_parameters)
        if strict:
            parameters = strict_parameters
    if flavor == "openai":
        function: dict[str, Any] = {"name": tool.name, "description": tool.description, "parameters": parameters}
        if requested:
            function["strict"] = strict
        return {"type": "function", "function": function}
    if flavor == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": parameters}
    if flavor == "mcp":
        return {"name": tool.name, "description": tool.description, "inputSchema": parameters}
    if flavor == "gemini":
        declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if parameters.get("properties"):  # Gemini refuses an object schema without properties
            declaration["parameters"] = gemini_schema(parameters, tool=tool.name)
        return declaration
    raise InvalidArgument(f"unknown schema flavor {flavor!r}: use openai, anthropic, gemini or mcp")


def strict_expressible(node: Any) -> bool:
    """Whether OpenAI strict mode can take this schema: every object closed (additionalProperties false)."""
    if isinstance(node, list):
        return all(strict_expressible(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        return False
    return all(strict_expressible(value) for value in node.values())


def gemini_schema(schema: dict[str, Any], *, tool: str = "") -> dict[str, Any]:
    """Rewrite a JSON schema into the OpenAPI subset Gemini accepts: refs inlined, no titles or extras.

    Tuples become arrays of their (single) item type, non-string enums are
    described in words, and a parameter of no type at all (``Any``) is refused.
    """
    definitions = schema.get("$defs", {})
    expanding: list[str] = []

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in expanding:
                raise InvalidArgument(f"the Gemini schema format cannot express the recursive type {name!r}")
            expanding.append(name)
            try:
                return convert(definitions[name])
            finally:
                expanding.pop()
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values.get("description") and "description" not in node:
            # Gemini has no additionalProperties: say in words what the values are.
            node = {**node, "description": "An object whose values are each: " + values["description"]}
        prefix = node.get("prefixItems")
        if prefix and "items" not in node:
            kinds = {json.dumps(item, sort_keys=True) for item in prefix}
            node = {**node, "items": prefix[0] if len(kinds) == 1 else {"anyOf": prefix}}
        enum = node.get("enum")
        if enum is not None and not all(isinstance(value, str) for value in enum):
            described = "One of: " + ", ".join(json.dumps(value) for value in enum)
            node = {k: v for k, v in node.items() if k != "enum"}
            node["description"] = f"{node['description']} ({described})" if node.get("description") else described
        if not node or ("type" not in node and not {"anyOf", "$ref", "properties"} & set(node)):
            raise InvalidArgument(f"tool {tool!r}: Gemini needs a type for every parameter (Any has none)")
        options = node.get("anyOf")
        if options is not None and {"type": "null"} in options:
            rest = [option for option in options if option != {"type": "null"}]
            merged = convert(rest[0]) if len(rest) == 1 else {"anyOf": convert(rest)}
            return {**merged, "nullable": True, **_kept(node, convert)}
        return {key: _convert_value(key, value, convert) for key, value in node.items() if key in _GEMINI_KEYS}

    return dict(convert({k: v for k, v in schema.items() if k != "$defs"}))


def untitled(node: Any) -> Any:
    """Drop pydantic's generated ``title`` keys (noise to a model); property names stay."""
    if isinstance(node, list):
        return [untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: (
            {name: untitled(sub) for name, sub in value.items()} if key in ("properties", "$defs") else untitled(value)
        )
        for key, value in node.items()
        if key != "title"
    }


def _convert_value(key: str, value: Any, convert: Callable[[Any], Any]) -> Any:
    if key == "properties" and isinstance(value, dict):
        return {name: convert(sub) for name, sub in value.items()}  # property names are not schema keys
    return convert(value)


_GEMINI_KEYS = frozenset(
    {"type", "format", "description", "nullable", "enum", "properties", "required", "items", "anyOf",
     "minItems", "maxItems", "minimum", "maximum", "pattern"}
)  # fmt: skip


def _kept(node: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
    return {
        key: _convert_value(key, value, convert)
        for key, value in node.items()
        if key in _GEMINI_KEYS and key != "anyOf"
    }
