"""The one shape of a framework adapter: which Toolbox tools it offers, in which scope.

Every adapter's tool factory is ``tools(box, *, scope, names=None)`` (Pydantic AI's is
``toolset(box, *, scope, names=None)``): ``box`` is the :class:`~refvault.toolbox.Toolbox`
whose tools to offer, ``scope`` the :class:`~refvault.model.Scope` every call runs in (for
ADK, whose sessions name their own scope, None: the scope of the session that makes the
call), ``names`` the tools to offer (default: all), and ``model_context_tokens`` the context window
of the model they serve, in tokens (default None: the Toolbox's own caps): every call through them
gets :meth:`Toolbox.caps_for(model_context_tokens) <refvault.toolbox.Toolbox.caps_for>`, the offload
threshold, preview size and read-tool caps scaled to that model, and the schemas show its read-tool
defaults. :func:`tool_schemas` checks these arguments, with the same errors for every adapter, and
picks the tools' schemas.

Every adapter's guard hook takes its guard the same way, as ``guard``: a
:class:`~refvault.guard.LeakGuard`, or the Toolbox whose guard to use, resolved by
:func:`refvault.guard.contract.resolve_guard` with the same errors everywhere:
``adk.guard_callback(guard)``, ``langchain.LeakGuardCallback(guard)``,
``openai_agents.guard_model_input(guard, *, inner=None)``,
``openai_agents.guarded_client(guard, *, transport=None, **kwargs)`` and
``pydantic_ai.GuardedModel(model, guard)`` (a Pydantic AI wrapper model: what it wraps comes first).
A hook that cannot send a redacted copy in place of the request refuses it under either policy
(:func:`refvault.guard.contract.refuse_leaks`); ADK's callback refuses a ``"redact"`` guard up front.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from refvault.errors import InvalidArgument
from refvault.model import Scope
from refvault.toolbox.toolbox import Toolbox

__all__ = ["tool_schemas"]

Flavor = Literal["openai", "gemini", "mcp"]


def tool_schemas(
    box: object,
    flavor: Flavor,
    *,
    scope: object,
    names: Iterable[str] | None,
    strict: bool = False,
    scope_optional: bool = False,
    in_given_order: bool = False,
    model_context_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """The schemas (``box.schemas(flavor)``) of the tools an adapter offers, after checking its arguments.

    All tools in registration order, or those in ``names``: in registration order, or in the order
    given when ``in_given_order`` (a name given twice counts once). Raises
    :class:`~refvault.errors.InvalidArgument` when ``box`` is not a Toolbox, ``scope`` not a Scope
    (None is accepted when ``scope_optional``), ``names`` one string rather than a list, when a
    name is not registered (the message names up to ten of them), or ``model_context_tokens`` is not
    None or a model size :func:`~refvault.limits.caps_for_model` accepts.
    """
    if not isinstance(box, Toolbox):
        raise InvalidArgument("box must be a refvault.Toolbox")
    if not isinstance(scope, Scope) and not (scope_optional and scope is None):
        raise InvalidArgument("scope must be a refvault.Scope(tenant=..., user=..., session=...)")
    if isinstance(names, str):
        raise InvalidArgument("names must be a list of tool names, not one string")
    schemas = box.schemas(flavor, strict=strict, model_context_tokens=model_context_tokens)
    by_name = {_name(schema, flavor): schema for schema in schemas}
    if names is None:
        return schemas
    wanted = list(dict.fromkeys(names))
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        shown = ", ".join(repr(str(name)[:64]) for name in unknown[:10])
        raise InvalidArgument(f"no tool named {shown} is registered on this Toolbox")
    if in_given_order:
        return [by_name[name] for name in wanted]
    chosen = set(wanted)
    return [schema for name, schema in by_name.items() if name in chosen]


def _name(schema: Mapping[str, Any], flavor: Flavor) -> str:
    return str(schema["function"]["name"] if flavor == "openai" else schema["name"])
