"""The leak guard as an ADK ``before_model_callback``: every model request checked before the model is called."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from refvault.guard.contract import GuardHolder, RequestChecker, resolve_guard

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest

__all__ = ["guard_callback"]


def guard_callback(guard: RequestChecker | GuardHolder | None) -> Callable[[CallbackContext, LlmRequest], None]:
    """A ``before_model_callback`` that checks every model request with ``guard`` and raises ContextLeak.

    ``guard`` is a :class:`~refvault.guard.LeakGuard` (or a Toolbox, for its ``box.guard``) with policy
    ``raise``. The whole request is checked (contents, system instruction, tool declarations) as
    ``llm_request.model_dump(mode="json")``. Put it last in a callback list, so nothing changes the
    request after it; ``guard.protect_scope(vault, scope_for(app, user, session))`` protects every
    sealed artifact of a session up front.
    """
    checker = resolve_guard(guard, raise_policy_for="guard_callback")

    def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        checker.check(llm_request.model_dump(mode="json", exclude_none=True, fallback=_rendered))

    return before_model_callback


def _rendered(value: Any) -> Any:
    """What JSON cannot hold as is: a response-schema class as its JSON schema, anything else as text."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        return value.model_json_schema()
    return str(value)
