"""A registered tool: the argument model built from a function's signature, and what bad arguments are told.

:func:`build_tool` turns a Python function into a :class:`Tool` (its pydantic
argument model, the parameter that receives the
:class:`~refvault.toolbox.values.ToolContext`, whether any argument can hold a
:class:`~refvault.toolbox.ref.Ref`). :func:`validation_message` says where and
how the model's arguments are wrong without echoing what it sent.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from typing_extensions import is_typeddict

from refvault.errors import InvalidType
from refvault.toolbox.ref import Ref
from refvault.toolbox.remote import RemoteLink
from refvault.toolbox.values import ToolContext

__all__ = ["TEMPLATED_ERRORS", "Tool", "build_tool", "mentions_link", "mentions_ref", "validation_message"]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool as the Toolbox holds it."""

    name: str
    description: str
    function: Callable[..., Any]
    arguments: type[BaseModel]
    context_parameter: str | None
    is_async: bool
    takes_refs: bool  # only decides whether resolution runs off the event loop
    fields: tuple[str, ...]
    offload_tokens: int | None = None  # None: never offload this tool's results
    builtin: bool = False  # refvault's own read tools: their refvault errors are shown (written content-free)
    data_only: bool = False  # its results are recovered content (read_artifact, query_artifact, load_artifacts)
    takes_links: bool = False  # a RemoteLink parameter: each call gets capability links, revoked when it ends
    deadline: timedelta | None = None  # how long its links live at most (None: DEFAULT_LINK_TTL)


def mentions_ref(annotation: Any, seen: set[int] | None = None) -> bool:
    """Whether a type annotation can hold a Ref anywhere (containers, unions, nested models)."""
    return _mentions(annotation, (Ref, RemoteLink), set() if seen is None else seen)


def mentions_link(annotation: Any) -> bool:
    """Whether a type annotation can hold a :class:`~refvault.toolbox.remote.RemoteLink` anywhere."""
    return _mentions(annotation, (RemoteLink,), set())


def _mentions(annotation: Any, kinds: tuple[type, ...], seen: set[int]) -> bool:
    if any(annotation is kind for kind in kinds):
        return True
    if id(annotation) in seen:
        return False
    seen.add(id(annotation))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return any(_mentions(f.annotation, kinds, seen) for f in annotation.model_fields.values())
    if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or is_typeddict(annotation)):
        return any(_mentions(hint, kinds, seen) for hint in typing.get_type_hints(annotation).values())
    return any(_mentions(arg, kinds, seen) for arg in typing.get_args(annotation))


# Pydantic error types whose message is a fixed template that never contains the input.
TEMPLATED_ERRORS = frozenset(
    {"missing", "extra_forbidden", "string_type", "int_type", "int_parsing", "float_type", "float_parsing",
     "bool_type", "bool_parsing", "list_type", "tuple_type", "set_type", "dict_type", "model_type",
     "model_attributes_type", "too_short", "too_long", "greater_than", "greater_than_equal", "less_than",
     "less_than_equal", "literal_error", "enum", "string_too_short", "string_too_long", "none_required",
     "int_from_float", "is_instance_of", "json_type", "dataclass_type", "multiple_of"}
)  # fmt: skip


def validation_message(exc: Exception) -> str:
    """Where each argument is wrong and how, never what the model sent."""
    if not isinstance(exc, ValidationError):
        return "the arguments are not a JSON object"
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    if any(error["type"] in ("json_invalid", "model_type") and not error["loc"] for error in errors):
        return "the arguments are not a JSON object"
    problems = []
    for error in errors[:10]:
        where = ".".join(str(part)[:64] for part in error["loc"]) or "(arguments)"
        what = error["msg"] if error["type"] in TEMPLATED_ERRORS else f"invalid value ({error['type']})"
        problems.append(f"{where}: {what}")
    return "invalid arguments: " + "; ".join(problems)


def build_tool(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    context: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Tool:
    """The :class:`Tool` of ``fn``: ``context`` names a parameter that receives the ToolContext by name.

    ``defaults`` replaces the defaults of the parameters it names (in the schema and when the model omits them).
    """
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(fn).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if parameter.name == context or annotation is ToolContext or ToolContext in typing.get_args(annotation):
            context_parameter = parameter.name
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise InvalidType(f"tool {fn.__name__}: *args and **kwargs cannot be described to a model")
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        if defaults is not None and parameter.name in defaults:
            default = defaults[parameter.name]
        fields[parameter.name] = (annotation, default)
    tool_name = name or fn.__name__
    arguments = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return Tool(
        name=tool_name,
        description=description or inspect.getdoc(fn) or "",
        function=fn,
        arguments=arguments,
        context_parameter=context_parameter,
        is_async=inspect.iscoroutinefunction(fn),
        takes_refs=any(mentions_ref(annotation) for annotation, _ in fields.values()),
        takes_links=any(mentions_link(annotation) for annotation, _ in fields.values()),
        fields=tuple(fields),
    )
