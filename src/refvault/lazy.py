"""Lazy package exports: a package names what it exports and where each name lives; each is imported on first use.

So ``import refvault`` (or ``refvault.read``, ``refvault.guard``, ...) stays cheap: numba kernels, the HTTP stack
and the framework SDKs load only when a name that needs them is first used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose ``exports`` map each name to the module defining it.

    A name whose module is ``package.name`` itself stands for that module (``refvault.errors``). A value is
    stored in ``namespace`` (the package's globals) on first use, so each import happens once and later
    lookups are plain attribute reads. Any other name raises :class:`AttributeError`, as for any module.
    ``__dir__`` lists the package's globals and its ``__all__``.
    """

    def module_getattr(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(module_name)
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def module_dir() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return module_getattr, module_dir
