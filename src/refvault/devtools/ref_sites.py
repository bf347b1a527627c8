"""Check that resolved Ref values have exactly one production site.

:func:`refvault.toolbox.substitute.bind_refs` is the only function that puts
resolved bytes into a dispatch frame, :meth:`refvault.toolbox.ref.DispatchFrame.admit`
is how it does so, and :func:`refvault.toolbox.ref.enter_frame` is how a frame
becomes readable. Each is a guarded target with its own allow-list. This checker
parses every ``.py`` file under a root with :mod:`ast` (nothing is imported or
executed) and reports:

* ``unallowed-call``: a call of a target from a function that is not on its
  allow-list (:data:`ALLOWED_CALL_SITES` for ``bind_refs``,
  :data:`ALLOWED_ENTER_FRAME_SITES`, :data:`ALLOWED_ADMIT_SITES`). ``admit`` is
  matched by name: ``<anything>.admit(…)`` counts;
* ``value-use``: a target used as a value instead of being called (assigned,
  passed as an argument, returned, stored in a container, used as a decorator,
  read as an attribute, rebound, fetched with ``getattr(module, "bind_refs")``
  or ``getattr`` with a computed name on its module), and any use of a target's
  module object other than reading an ordinary attribute (``m.x``): passing
  the module around, assigning it, ``vars(m)``, ``m.__dict__``;
* ``dynamic-reference``: a string constant that names a target or the
  ``substitute`` module: a ``.``/``:``-separated part equal to ``bind_refs``,
  ``substitute``, ``enter_frame`` or ``admit`` (``sys.modules[…]``,
  ``__import__``, ``import_module``, ``attrgetter``, ``pkgutil.resolve_name``,
  ``globals()[…]`` all need one). Docstrings (a string as a bare expression
  statement) and the target's own module are exempt; a site can be allowed
  through :data:`ALLOWED_DYNAMIC_SITES`;
* ``stale-allow``: an allow-list entry whose site has no call (or dynamic
  reference) any more, per target;
* ``empty-reason`` / ``bad-allow-key``: a malformed allow-list entry;
* ``unparsable``: a file that does not parse, a directory that cannot be listed,
  or a symlinked directory (not followed) (a failure, never skipped);
* ``empty-scan``: no file was read at all.

Names are followed through ``import a.b.c``, ``import a.b.c as x``,
``from a.b import c as x``, relative imports (resolved against the file's
module path), ``from m import *``, ``importlib.import_module("a.b.c")``,
plain ``name = other.name`` assignments, and re-exports by other scanned
modules. An attribute named ``bind_refs`` or ``enter_frame`` on something that
cannot be resolved (``sys.modules[…].bind_refs``) counts as the target.
Bindings are tracked per file rather than per scope, which errs on the side of
reporting. Test-looking files (``test_*.py`` or anything under a ``tests``
directory) are skipped only when they are outside every package: a file in a
directory at or under one with ``__init__.py`` is always scanned.

A site key is ``<path>:<qualified function name>``, e.g.
``refvault/toolbox/toolbox.py:Toolbox._prepare``: the path is relative to the
directory that holds the top-level package and module-level code is
``<module>``. Keys name functions rather than lines so that edits elsewhere
in a file do not break them.

Run ``python -m refvault.devtools.ref_sites [ROOT]``: one line per finding, then a
summary line; exit status 0 when clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

__all__ = [
    "ALLOWED_ADMIT_SITES",
    "ALLOWED_CALL_SITES",
    "ALLOWED_DYNAMIC_SITES",
    "ALLOWED_ENTER_FRAME_SITES",
    "TARGET",
    "TARGETS",
    "TARGET_FUNCTION",
    "TARGET_MODULE",
    "Finding",
    "ScanReport",
    "Target",
    "main",
    "scan",
]

TARGET_MODULE = "refvault.toolbox.substitute"
TARGET_FUNCTION = "bind_refs"
TARGET = f"{TARGET_MODULE}.{TARGET_FUNCTION}"
REF_MODULE = "refvault.toolbox.ref"


@dataclass(frozen=True, slots=True)
class Target:
    """A guarded callable: a module-level function (followed through aliases) or a method matched by name."""

    module: str
    name: str
    method_of: str = ""  # class name when the target is a method: then any ``<x>.<name>(…)`` counts

    @property
    def qualname(self) -> str:
        return ".".join(p for p in (self.module, self.method_of, self.name) if p)


BIND_REFS = Target(TARGET_MODULE, TARGET_FUNCTION)
ENTER_FRAME = Target(REF_MODULE, "enter_frame")
ADMIT = Target(REF_MODULE, "admit", method_of="DispatchFrame")
TARGETS: tuple[Target, ...] = (BIND_REFS, ENTER_FRAME, ADMIT)

#: The only places allowed to call ``bind_refs``: site key -> why (a non-empty reason).
ALLOWED_CALL_SITES: Mapping[str, str] = MappingProxyType(
    {
        "refvault/toolbox/toolbox.py:Toolbox._prepare": (
            "the dispatcher: resolves a validated tool call's Ref arguments into that call's "
            "dispatch frame, once per attempt, in the caller's scope"
        ),
    }
)

#: The only places allowed to make a dispatch frame current with ``enter_frame``.
ALLOWED_ENTER_FRAME_SITES: Mapping[str, str] = MappingProxyType(
    {
        "refvault/toolbox/toolbox.py:Toolbox.call": (
            "the async dispatcher: makes the call's own frame current for exactly the tool call, then leaves it"
        ),
        "refvault/toolbox/toolbox.py:Toolbox.call_sync": (
            "the sync dispatcher: makes the call's own frame current for exactly the tool call, then leaves it"
        ),
    }
)

#: The only places allowed to call ``<frame>.admit(…)`` (any method named ``admit``).
ALLOWED_ADMIT_SITES: Mapping[str, str] = MappingProxyType(
    {
        "refvault/toolbox/substitute.py:_resolve": (
            "bind_refs' helper: admits one artifact the caller's scope may read, after describing it"
        ),
    }
)

#: Sites allowed to hold a string naming a target.
ALLOWED_DYNAMIC_SITES: Mapping[str, str] = MappingProxyType(
    {
        "refvault/devtools/ref_sites.py:<module>": (
            "this checker's own tables spell the guarded names in order to look for them; it never imports "
            "or calls what they name"
        ),
    }
)

#: ``.``/``:``-separated parts of a string constant that name a guarded object, and the module exempt for each.
_GUARDED_PARTS: Mapping[str, str] = MappingProxyType(
    {"bind_refs": TARGET_MODULE, "substitute": TARGET_MODULE, "enter_frame": REF_MODULE, "admit": REF_MODULE}
)
#: Modules whose module object may only have ordinary attributes read from it.
_GUARDED_MODULES = frozenset({TARGET_MODULE, REF_MODULE})
_PART_SPLIT = re.compile(r"[.:]")

_FUNCTION_TARGETS = tuple(t for t in TARGETS if not t.method_of)
_METHOD_TARGETS = tuple(t for t in TARGETS if t.method_of)

MODULE_SCOPE = "<module>"
_MAX_REWRITES = 64  # bound on alias-chain rewriting, so an import cycle cannot loop forever
_MAX_PARTS = 32  # longest dotted path an assignment alias may bind


@dataclass(frozen=True, slots=True, order=True)
class Finding:
    """One problem, located by file path (relative, POSIX), line and column (1-based; 0 for allow-list entries)."""

    path: str
    line: int
    col: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.rule}: {self.message}"


@dataclass(frozen=True, slots=True)
class ScanReport:
    """The outcome of :func:`scan`: findings in (path, line, col) order and how many files were read."""

    root: Path
    files_read: int
    findings: tuple[Finding, ...]
    allowed_calls: tuple[str, ...] = field(default=())  # every allowed site key that was seen, sorted

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        status = "clean" if self.ok else f"{len(self.findings)} finding(s)"
        names = ", ".join(t.qualname for t in TARGETS)
        return (
            f"scan of {names}: {self.files_read} file(s) read, {len(self.allowed_calls)} allowed call site(s), {status}"
        )


# -- file discovery ------------------------------------------------------------------


def _is_test_file(relative: Path) -> bool:
    return relative.name.startswith("test_") or "tests" in relative.parts[:-1]


class _Packages:
    """Whether a directory is inside a package: it, or an ancestor up to the scan root, holds ``__init__.py``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.known: dict[Path, bool] = {}

    def inside(self, directory: Path) -> bool:
        if directory not in self.known:
            inside = (directory / "__init__.py").is_file()
            if not inside and directory != self.root and directory.is_relative_to(self.root):
                inside = self.inside(directory.parent)
            self.known[directory] = inside
        return self.known[directory]


def _python_files(root: Path, base: Path, packages: _Packages) -> tuple[list[Path], list[Finding]]:
    found: list[Path] = []
    problems: list[Finding] = []

    def unlistable(error: OSError) -> None:
        where = Path(error.filename) if error.filename else root
        display = where.relative_to(base).as_posix() if where.is_relative_to(base) else str(where)
        problems.append(Finding(display, 0, 0, "unparsable", f"directory cannot be listed: {error.strerror or error}"))

    for directory, subdirectories, files in os.walk(root, onerror=unlistable):
        kept = []
        for name in sorted(subdirectories):
            if name == "__pycache__":
                continue
            if Path(directory, name).is_symlink():
                display = Path(directory, name).relative_to(base).as_posix()
                problems.append(Finding(display, 0, 0, "unparsable", "symlinked directory is not followed"))
                continue
            kept.append(name)
        subdirectories[:] = kept
        in_package = packages.inside(Path(directory))
        for name in sorted(files):
            path = Path(directory, name)
            if name.endswith(".py") and (in_package or not _is_test_file(path.relative_to(root))):
                found.append(path)
    return found, problems


def _module_name(path: Path, packages: _Packages) -> str:
    """The dotted import name of ``path``: its parent directories count while they are inside a package."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    directory = path.parent
    while directory.parent != directory and ((directory / "__init__.py").is_file() or packages.inside(directory)):
        parts.insert(0, directory.name)
        directory = directory.parent
    return ".".join(parts)


def _display_base(root: Path) -> Path:
    return root.parent if (root / "__init__.py").is_file() else root


# -- per-file name bindings ----------------------------------------------------------


@dataclass
class _Source:
    path: Path
    display: str
    module: str
    is_package: bool
    tree: ast.Module
    bindings: dict[str, set[str]] = field(default_factory=dict)

    def bind(self, name: str, qualname: str) -> bool:
        names = self.bindings.setdefault(name, set())
        if qualname in names:
            return False
        names.add(qualname)
        return True


def _absolute(source: _Source, module: str | None, level: int) -> str | None:
    """Resolve the module named by ``from <level dots><module> import …`` in ``source``."""
    if level == 0:
        return module
    package = source.module.split(".") if source.is_package else source.module.split(".")[:-1]
    if level - 1 > len(package) or (level - 1 == len(package) and not module):
        return None
    base = package[: len(package) - (level - 1)]
    if module:
        base = [*base, *module.split(".")]
    return ".".join(base) if base else None


def _collect_bindings(source: _Source) -> None:
    """Record every name this file binds to a dotted path: imports, definitions of the target, simple aliases."""
    assignments: list[tuple[str, ast.expr]] = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    source.bind(alias.asname, alias.name)
                else:
                    head = alias.name.split(".", 1)[0]
                    source.bind(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(source, node.module, node.level)
            if base is None:
                continue
            for alias in node.names:
                if alias.name == "*":
                    for target in _FUNCTION_TARGETS:
                        source.bind(target.name, f"{base}.{target.name}")
                else:
                    source.bind(alias.asname or alias.name, f"{base}.{alias.name}")
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None:
                assignments.extend((t.id, node.value) for t in targets if isinstance(t, ast.Name))
    for target in _FUNCTION_TARGETS:
        if source.module == target.module:
            for statement in source.tree.body:
                if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name == target.name:
                    source.bind(target.name, target.qualname)
    changed = True
    while changed:  # terminates: bindings only grow, and paths are capped at _MAX_PARTS
        changed = False
        for name, value in assignments:
            for qualname in _raw_qualnames(source, value):
                if qualname.count(".") < _MAX_PARTS:  # ``x = x.y`` would otherwise grow forever
                    changed |= source.bind(name, qualname)


def _raw_qualnames(source: _Source, node: ast.expr, depth: int = 0) -> set[str]:
    """Dotted paths ``node`` may denote, using this file's bindings only (not yet canonicalised)."""
    if depth > _MAX_REWRITES:
        return set()
    if isinstance(node, ast.Name):
        return set(source.bindings.get(node.id, ()))
    if isinstance(node, ast.Attribute):
        return {f"{q}.{node.attr}" for q in _raw_qualnames(source, node.value, depth + 1)}
    if isinstance(node, ast.Call) and node.args and not node.keywords:
        module = node.args[0]
        if isinstance(module, ast.Constant) and isinstance(module.value, str) and not module.value.startswith("."):
            functions = _raw_qualnames(source, node.func, depth + 1)
            if "importlib.import_module" in functions:
                return {module.value}
    return set()


# -- the checker ---------------------------------------------------------------------


class _Resolver:
    """Canonicalise dotted paths through re-exports: ``pkg.name`` where ``pkg`` binds ``name`` to something."""

    def __init__(self, sources: Sequence[_Source]) -> None:
        self.exports: dict[str, set[str]] = {}
        for source in sources:
            if not source.module:
                continue
            for name, qualnames in source.bindings.items():
                key = f"{source.module}.{name}"
                self.exports.setdefault(key, set()).update(q for q in qualnames if q != key)

    def canonical(self, qualnames: set[str]) -> set[str]:
        done: set[str] = set()
        pending = set(qualnames)
        for _ in range(_MAX_REWRITES):
            if not pending:
                break
            following: set[str] = set()
            for qualname in pending:
                if qualname in done:
                    continue
                done.add(qualname)
                parts = qualname.split(".")
                for cut in range(len(parts), 0, -1):
                    rewrites = self.exports.get(".".join(parts[:cut]))
                    if rewrites:
                        following.update(".".join([r, *parts[cut:]]) for r in rewrites)
                        break
            pending = following - done
        return done

    def denotes(self, source: _Source, node: ast.expr, target: str) -> bool:
        return target in self.canonical(_raw_qualnames(source, node))


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, ast.AST | None, str]]:
    """Yield ``(node, parent, qualified function name)`` for every node (iteratively: deep trees are fine)."""
    stack: list[tuple[ast.AST, ast.AST | None, tuple[str, ...]]] = [(tree, None, ())]
    while stack:
        node, parent, scope = stack.pop()
        yield node, parent, ".".join(scope) or MODULE_SCOPE
        for name, value in ast.iter_fields(node):
            inner = scope
            if name == "body" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, node.name)
            children = value if isinstance(value, list) else [value]
            stack.extend((child, node, inner) for child in reversed(children) if isinstance(child, ast.AST))


def _value_kind(node: ast.expr, parent: ast.AST | None) -> str:
    if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node in parent.decorator_list:
        return "used as a decorator"
    if isinstance(parent, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        return "assigned"
    if isinstance(parent, ast.Call | ast.keyword | ast.Starred):
        return "passed as an argument"
    if isinstance(parent, ast.Return | ast.Yield | ast.YieldFrom | ast.Lambda):
        return "returned"
    if isinstance(parent, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return "stored in a container"
    if isinstance(parent, ast.Attribute):
        return "read as an object (attribute access)"
    if isinstance(parent, ast.arguments):
        return "used as a default argument"
    return "referenced as a value"


def _is_builtin(source: _Source, resolver: _Resolver, func: ast.expr, name: str) -> bool:
    if isinstance(func, ast.Name) and func.id == name and name not in source.bindings:
        return True
    return f"builtins.{name}" in resolver.canonical(_raw_qualnames(source, func))


def _dynamic_finding(
    source: _Source, resolver: _Resolver, node: ast.Call | ast.Subscript, target: Target
) -> str | None:
    """A message if ``node`` fetches ``target`` from its module by name rather than by attribute.

    Covers ``getattr(<module>, "bind_refs")``, ``getattr(<module>, <computed name>)``,
    ``vars(<module>)["bind_refs"]`` and ``<module>.__dict__["bind_refs"]``.
    """
    if isinstance(node, ast.Call):
        if len(node.args) < 2 or not _is_builtin(source, resolver, node.func, "getattr"):
            return None
        holder, name = node.args[0], node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            if resolver.denotes(source, holder, target.module):
                return f"{target.module} read with getattr and a computed name"
            return None
        paths = resolver.canonical({f"{q}.{name.value}" for q in _raw_qualnames(source, holder)})
        return f'fetched with getattr(…, "{name.value}")' if target.qualname in paths else None
    key, namespace = node.slice, node.value
    if not (isinstance(key, ast.Constant) and key.value == target.name):
        return None
    if isinstance(namespace, ast.Attribute) and namespace.attr == "__dict__":
        owner = namespace.value
    elif (
        isinstance(namespace, ast.Call)
        and len(namespace.args) == 1
        and _is_builtin(source, resolver, namespace.func, "vars")
    ):
        owner = namespace.args[0]
    else:
        return None
    if resolver.denotes(source, owner, target.module):
        return f'fetched from the module namespace by the key "{target.name}"'
    return None


def _named_parts(value: object) -> set[str]:
    """The guarded names a string (or bytes) constant spells as one of its ``.``/``:``-separated parts."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return set()
    return {part for part in _PART_SPLIT.split(value) if part in _GUARDED_PARTS}


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


@dataclass
class _Sites:
    """Allow-lists by target qualname (plus ``dynamic``) and the allowed sites seen for each."""

    allow: Mapping[str, Mapping[str, str]]
    seen: dict[str, set[str]] = field(default_factory=dict)

    def permits(self, kind: str, site: str) -> bool:
        if site in self.allow[kind]:
            self.seen.setdefault(kind, set()).add(site)
            return True
        return False


def _check(source: _Source, resolver: _Resolver, sites: _Sites) -> list[Finding]:
    findings: list[Finding] = []

    def report(node: ast.expr, rule: str, message: str) -> None:
        findings.append(Finding(source.display, node.lineno, node.col_offset + 1, rule, message))

    def use(node: ast.expr, parent: ast.AST | None, target: Target, function: str) -> None:
        site = f"{source.display}:{function}"
        if not isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
            report(node, "value-use", f"{target.qualname} rebound or deleted in {function}")
        elif isinstance(parent, ast.Call) and parent.func is node:
            if not sites.permits(target.qualname, site):
                report(node, "unallowed-call", f"{target.qualname} called from {site}, which is not on the allow-list")
        else:
            report(node, "value-use", f"{target.qualname} {_value_kind(node, parent)} in {function}")

    for node, parent, function in _walk(source.tree):
        if isinstance(node, ast.Constant):
            named = {n for n in _named_parts(node.value) if _GUARDED_PARTS[n] != source.module}
            docstring = isinstance(parent, ast.Expr) and parent.value is node
            if named and not docstring and not sites.permits("dynamic", f"{source.display}:{function}"):
                report(node, "dynamic-reference", f"string naming {', '.join(sorted(named))} in {function}")
            continue
        if isinstance(node, ast.Call | ast.Subscript):
            for target in _FUNCTION_TARGETS:
                message = _dynamic_finding(source, resolver, node, target)
                if message is not None:
                    report(node, "value-use", f"{target.qualname} {message} in {function}")
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            continue  # an alias being bound: the value it is bound to is what gets reported
        if isinstance(node, ast.Attribute):
            for target in _METHOD_TARGETS:
                if node.attr == target.name:
                    use(node, parent, target, function)
        paths = resolver.canonical(_raw_qualnames(source, node))
        unresolved_base = isinstance(node, ast.Attribute) and not _raw_qualnames(source, node.value)
        for target in _FUNCTION_TARGETS:
            if target.qualname in paths or (unresolved_base and node.attr == target.name):  # type: ignore[union-attr]
                use(node, parent, target, function)
        if not isinstance(node.ctx, ast.Load) or not paths & _GUARDED_MODULES:
            continue
        if isinstance(parent, ast.Attribute) and parent.value is node and not _is_dunder(parent.attr):
            continue  # reading an ordinary attribute of the module
        module = ", ".join(sorted(paths & _GUARDED_MODULES))
        kind = f"read through {parent.attr}" if isinstance(parent, ast.Attribute) else _value_kind(node, parent)
        report(node, "value-use", f"module {module} {kind} in {function}")
    return findings


def _allow_list_findings(kind: str, allow: Mapping[str, str], seen: set[str]) -> list[Finding]:
    findings: list[Finding] = []
    for key, reason in allow.items():
        path, colon, function = key.partition(":")
        if not colon or not path.endswith(".py") or not function:
            findings.append(
                Finding(path, 0, 0, "bad-allow-key", f"{kind} allow-list key {key!r} is not '<path>.py:<function>'")
            )
            continue
        if not isinstance(reason, str) or not reason.strip():
            findings.append(Finding(path, 0, 0, "empty-reason", f"{kind} allow-list entry {key!r} has no reason"))
        if key not in seen:
            findings.append(Finding(path, 0, 0, "stale-allow", f"{kind} allow-list entry {key!r} matches no site"))
    return findings


def scan(
    root: Path,
    allow: Mapping[str, str] | None = None,
    *,
    allow_enter_frame: Mapping[str, str] | None = None,
    allow_admit: Mapping[str, str] | None = None,
    allow_dynamic: Mapping[str, str] | None = None,
) -> ScanReport:
    """Check every non-test ``.py`` file under ``root``; each allow-list defaults to its module constant.

    ``allow`` is for ``bind_refs`` (:data:`ALLOWED_CALL_SITES`), ``allow_enter_frame`` for ``enter_frame``,
    ``allow_admit`` for ``.admit(…)`` and ``allow_dynamic`` for strings naming a target.
    """
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    sites = _Sites(
        {
            BIND_REFS.qualname: ALLOWED_CALL_SITES if allow is None else allow,
            ENTER_FRAME.qualname: ALLOWED_ENTER_FRAME_SITES if allow_enter_frame is None else allow_enter_frame,
            ADMIT.qualname: ALLOWED_ADMIT_SITES if allow_admit is None else allow_admit,
            "dynamic": ALLOWED_DYNAMIC_SITES if allow_dynamic is None else allow_dynamic,
        }
    )
    base = _display_base(root)
    packages = _Packages(root)
    sources: list[_Source] = []
    paths, findings = _python_files(root, base, packages)
    for path in paths:
        display = path.relative_to(base).as_posix()
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError as exc:
            line, col = exc.lineno or 0, exc.offset or 0
            findings.append(Finding(display, line, col, "unparsable", f"does not parse: {exc.msg}"))
            continue
        except (ValueError, OSError, RecursionError, MemoryError) as exc:  # null bytes, unreadable, too deep
            findings.append(Finding(display, 0, 0, "unparsable", f"cannot be parsed: {type(exc).__name__}: {exc}"))
            continue
        source = _Source(path, display, _module_name(path, packages), path.name == "__init__.py", tree)
        _collect_bindings(source)
        sources.append(source)
    resolver = _Resolver(sources)
    for source in sources:
        findings.extend(_check(source, resolver, sites))
    for kind, allow_list in sites.allow.items():
        findings.extend(_allow_list_findings(kind, allow_list, sites.seen.get(kind, set())))
    if not paths:
        findings.append(Finding(".", 0, 0, "empty-scan", f"no Python files found under {root}"))
    seen = sorted({site for kind, found in sites.seen.items() if kind != "dynamic" for site in found})
    return ScanReport(root, len(paths), tuple(sorted(findings)), tuple(seen))


def _default_root() -> Path:
    import refvault

    return Path(refvault.__file__).resolve().parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m refvault.devtools.ref_sites",
        description="Report call sites and value uses of "
        + ", ".join(t.qualname for t in TARGETS)
        + " outside their allow-lists.",
    )
    parser.add_argument("root", nargs="?", type=Path, help="directory to scan (default: the refvault package)")
    arguments = parser.parse_args(argv)
    root: Path = arguments.root if arguments.root is not None else _default_root()
    if not root.is_dir():
        parser.error(f"not a directory: {root}")
    report = scan(root)
    for finding in report.findings:
        print(finding)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
