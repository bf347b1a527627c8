"""The one-production-site checker (``refvault.devtools.ref_sites``): the real tree is clean, and every rule can fail.

Each rule is proved on a small synthetic ``refvault`` package written under
``tmp_path``. Lines expected to be reported carry a ``# hit: <rule>`` marker,
so each test states exactly which lines must be found, and nothing else.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import refvault
from refvault.devtools.ref_sites import (
    ALLOWED_ADMIT_SITES,
    ALLOWED_CALL_SITES,
    ALLOWED_DYNAMIC_SITES,
    ALLOWED_ENTER_FRAME_SITES,
    TARGET,
    Finding,
    ScanReport,
    main,
    scan,
)

ALLOWED_SITE = "refvault/toolbox/toolbox.py:Toolbox._prepare"
ADMIT_SITE = "refvault/toolbox/substitute.py:_resolve"
ENTER_SITES = ("refvault/toolbox/toolbox.py:Toolbox.call", "refvault/toolbox/toolbox.py:Toolbox.call_sync")
BASE_SITES = tuple(sorted((ALLOWED_SITE, ADMIT_SITE, *ENTER_SITES)))
ENTER_FRAME = "refvault.toolbox.ref.enter_frame"
ADMIT = "refvault.toolbox.ref.DispatchFrame.admit"
NO_FRAME = {"allow_enter_frame": {}}  # for tests that replace toolbox.py with one lacking call/call_sync

SUBSTITUTE = '''
"""Stand-in for the real module: bind_refs is defined here, which is not a use."""

__all__ = ["MAX_DEPTH", "bind_refs"]

MAX_DEPTH = 32


def bind_refs(arguments, frame):
    """bind_refs(arguments, frame) resolves refs."""
    return []


def _resolve(artifact_id, frame):
    frame.admit(artifact_id, None)
'''

REF = '''
"""Stand-in for refvault.toolbox.ref: the frame and enter_frame are defined here, which is not a use."""

__all__ = ["DispatchFrame", "enter_frame"]


class DispatchFrame:
    def admit(self, artifact_id, descriptor):
        pass


def enter_frame(frame):
    return lambda: None
'''

SCANNER = '''
"""Stand-in for the checker: its tables spell the guarded names (allowed by ALLOWED_DYNAMIC_SITES)."""

GUARDED = ("bind_refs", "substitute", "enter_frame", "admit")
'''

TOOLBOX = """
from refvault.toolbox.ref import enter_frame
from refvault.toolbox.substitute import bind_refs


class Toolbox:
    async def call(self, frame):
        leave = enter_frame(frame)
        leave()

    def call_sync(self, frame):
        leave = enter_frame(frame)
        leave()

    def _prepare(self, validated, frame):
        return bind_refs(validated, frame)
"""

BASE = {
    "refvault/__init__.py": "",
    "refvault/toolbox/__init__.py": "",
    "refvault/toolbox/substitute.py": SUBSTITUTE,
    "refvault/toolbox/ref.py": REF,
    "refvault/devtools/ref_sites.py": SCANNER,
    "refvault/toolbox/toolbox.py": TOOLBOX,
}

HIT = re.compile(r"#\s*hit:\s*([a-z-]+(?:\s*,\s*[a-z-]+)*)")  # one rule per expected finding on the line


def build(tmp_path: Path, files: dict[str, str]) -> Path:
    """Write BASE overlaid with ``files`` under ``tmp_path``; return the package root ``tmp_path/refvault``."""
    for relative, text in {**BASE, **files}.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "refvault"


def expected_hits(files: dict[str, str]) -> list[tuple[str, int, str]]:
    hits = []
    for relative, text in files.items():
        for number, line in enumerate(textwrap.dedent(text).splitlines(), start=1):
            match = HIT.search(line)
            if match:
                hits.extend((relative, number, rule.strip()) for rule in match.group(1).split(","))
    return sorted(hits)


def located(report: ScanReport) -> list[tuple[str, int, str]]:
    return sorted((f.path, f.line, f.rule) for f in report.findings)


def check(tmp_path: Path, files: dict[str, str], allow: dict[str, str] | None = None, **lists: Any) -> ScanReport:
    """Scan a synthetic tree; assert the findings are exactly the marked lines (and at least one)."""
    report = scan(build(tmp_path, files), allow, **lists)
    expected = expected_hits(files)
    assert expected, "a rule test must mark at least one expected finding"
    assert located(report) == expected, "\n".join(str(f) for f in report.findings)
    assert not report.ok
    return report


# -- the real tree -------------------------------------------------------------------


def test_real_tree_is_clean_and_not_empty() -> None:
    root = Path(refvault.__file__).resolve().parent
    report = scan(root)
    assert report.ok, "\n".join(str(f) for f in report.findings)
    assert report.files_read >= 20  # an empty or truncated scan cannot pass
    assert report.allowed_calls == BASE_SITES  # every allowed production call really was seen


def test_real_allow_lists_have_reasons() -> None:
    assert ALLOWED_SITE in ALLOWED_CALL_SITES
    assert ADMIT_SITE in ALLOWED_ADMIT_SITES
    assert tuple(ALLOWED_ENTER_FRAME_SITES) == ENTER_SITES
    assert list(ALLOWED_DYNAMIC_SITES) == ["refvault/devtools/ref_sites.py:<module>"]
    for allow in (ALLOWED_CALL_SITES, ALLOWED_ADMIT_SITES, ALLOWED_ENTER_FRAME_SITES, ALLOWED_DYNAMIC_SITES):
        assert all(reason.strip() for reason in allow.values())


def test_cli_on_the_installed_package_exits_zero() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "refvault.devtools.ref_sites"], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    files = int(re.search(r"(\d+) file\(s\) read", lines[0]).group(1))  # type: ignore[union-attr]
    assert files >= 20
    assert "clean" in lines[0]


# -- the synthetic baseline ----------------------------------------------------------


def test_synthetic_baseline_is_clean(tmp_path: Path) -> None:
    """The definition, ``__all__``, docstrings and an allowed call are not findings."""
    report = scan(build(tmp_path, {}))
    assert report.ok, report.findings
    assert report.files_read == len(BASE)
    assert report.allowed_calls == BASE_SITES


def test_keys_do_not_depend_on_which_root_is_given(tmp_path: Path) -> None:
    files = {"refvault/user.py": "from refvault.toolbox.substitute import bind_refs\nbind_refs(1, 2)\n"}
    package_root = build(tmp_path, files)
    from_package = scan(package_root)
    from_parent = scan(tmp_path)  # like scanning src/ instead of src/refvault
    assert from_package.findings == from_parent.findings
    assert [f.path for f in from_package.findings] == ["refvault/user.py"]


# -- rule 1: unallowed call sites, through every import form --------------------------

CALL_FORMS = {
    "direct": {
        "refvault/user.py": """
            from refvault.toolbox.substitute import bind_refs

            def run(a, f):
                return bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "import-as": {
        "refvault/user.py": """
            import refvault.toolbox.substitute as s

            def run(a, f):
                return s.bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "from-import-as": {
        "refvault/user.py": """
            from refvault.toolbox.substitute import bind_refs as b

            def run(a, f):
                return b(a, f)  # hit: unallowed-call
        """
    },
    "from-package-import-module": {
        "refvault/user.py": """
            from refvault.toolbox import substitute

            def run(a, f):
                return substitute.bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "from-package-import-module-as": {
        "refvault/user.py": """
            from refvault.toolbox import substitute as sub

            sub.bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "plain-import": {
        "refvault/user.py": """
            import refvault.toolbox.substitute

            def run(a, f):
                return refvault.toolbox.substitute.bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "import-top-package": {
        "refvault/user.py": """
            import refvault

            refvault.toolbox.substitute.bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "function-local-import": {
        "refvault/user.py": """
            def run(a, f):
                from refvault.toolbox.substitute import bind_refs as hidden
                return hidden(a, f)  # hit: unallowed-call
        """
    },
    "star-import": {
        "refvault/user.py": """
            from refvault.toolbox.substitute import *

            bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "relative-sibling-function": {
        "refvault/toolbox/other.py": """
            from .substitute import bind_refs

            def run(a, f):
                return bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "relative-sibling-function-as": {
        "refvault/toolbox/other.py": """
            from .substitute import bind_refs as b

            b(1, 2)  # hit: unallowed-call
        """
    },
    "relative-sibling-module": {
        "refvault/toolbox/other.py": """
            from . import substitute

            def run(a, f):
                return substitute.bind_refs(a, f)  # hit: unallowed-call
        """
    },
    "relative-parent": {
        "refvault/toolbox/deep/__init__.py": "",
        "refvault/toolbox/deep/inner.py": """
            from ..substitute import bind_refs
            from .. import substitute as s

            bind_refs(1, 2)  # hit: unallowed-call
            s.bind_refs(1, 2)  # hit: unallowed-call
        """,
    },
    "relative-from-top-package": {
        "refvault/user.py": """
            from .toolbox.substitute import bind_refs
            from .toolbox import substitute

            bind_refs(1, 2)  # hit: unallowed-call
            substitute.bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "relative-in-package-init": {
        "refvault/toolbox/__init__.py": """
            from .substitute import bind_refs

            bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "re-export": {
        "refvault/toolbox/__init__.py": "from .substitute import bind_refs as exported\n",
        "refvault/user.py": """
            from refvault.toolbox import exported
            import refvault.toolbox as tb

            exported(1, 2)  # hit: unallowed-call
            tb.exported(1, 2)  # hit: unallowed-call
        """,
    },
    "module-alias-by-assignment": {
        "refvault/user.py": """
            from refvault.toolbox import substitute

            mod = substitute  # hit: value-use
            again = mod  # hit: value-use
            again.bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "importlib": {
        "refvault/user.py": """
            import importlib

            mod = importlib.import_module("refvault.toolbox.substitute")  # hit: dynamic-reference
            mod.bind_refs(1, 2)  # hit: unallowed-call
        """
    },
    "awaited-and-nested": {
        "refvault/user.py": """
            from refvault.toolbox.substitute import bind_refs

            class Outer:
                class Inner:
                    async def run(self, a, f):
                        return [await bind_refs(a, f)]  # hit: unallowed-call
        """
    },
    "other-function-in-the-allowed-file": {
        "refvault/toolbox/toolbox.py": TOOLBOX
        + textwrap.dedent("""
            def helper(a, f):
                return bind_refs(a, f)  # hit: unallowed-call
        """)
    },
    "nested-function-in-the-allowed-method": {
        "refvault/toolbox/toolbox.py": TOOLBOX
        + textwrap.indent(
            textwrap.dedent("""
                def _again(self, validated, frame):
                    def inner():
                        return bind_refs(validated, frame)  # hit: unallowed-call
                    return inner()
            """),
            "    ",
        )
    },
    "recursion-inside-substitute": {
        "refvault/toolbox/substitute.py": SUBSTITUTE
        + textwrap.dedent("""
            def again(a, f):
                return bind_refs(a, f)  # hit: unallowed-call
        """)
    },
}


@pytest.mark.parametrize("files", CALL_FORMS.values(), ids=CALL_FORMS.keys())
def test_unallowed_call_is_reported(tmp_path: Path, files: dict[str, str]) -> None:
    report = check(tmp_path, files)
    for finding in (f for f in report.findings if f.rule == "unallowed-call"):
        assert TARGET in finding.message
        assert "not on the allow-list" in finding.message


def test_call_message_names_the_site_key(tmp_path: Path) -> None:
    files = {
        "refvault/user.py": """
            from refvault.toolbox.substitute import bind_refs

            class Runner:
                def go(self):
                    bind_refs(1, 2)  # hit: unallowed-call

            bind_refs(3, 4)  # hit: unallowed-call
        """
    }
    report = check(tmp_path, files)
    assert "refvault/user.py:Runner.go" in report.findings[0].message
    assert "refvault/user.py:<module>" in report.findings[1].message
    assert report.findings[0].col == 9  # 1-based column of the callee


def test_a_site_becomes_allowed_by_its_key(tmp_path: Path) -> None:
    files = {"refvault/user.py": "from refvault.toolbox.substitute import bind_refs\n\ndef run():\n    bind_refs()\n"}
    allow = {ALLOWED_SITE: "the dispatcher", "refvault/user.py:run": "a second, documented site"}
    report = scan(build(tmp_path, files), allow)
    assert report.ok, report.findings
    assert report.allowed_calls == tuple(sorted((*BASE_SITES, "refvault/user.py:run")))


NOT_THE_TARGET = {
    "same-name-elsewhere": {
        "refvault/other.py": """
            def bind_refs(a, f):
                return []

            bind_refs(1, 2)
            handler = bind_refs
        """
    },
    "relative-import-of-another-substitute": {
        "refvault/plugins/__init__.py": "",
        "refvault/plugins/substitute.py": "def bind_refs(a, f):\n    return []\n",
        "refvault/plugins/user.py": """
            from .substitute import bind_refs
            from . import substitute

            bind_refs(1, 2)
            substitute.bind_refs(1, 2)
        """,
    },
    "other-names-of-the-module": {
        "refvault/user.py": """
            from refvault.toolbox import substitute as s

            depth = s.MAX_DEPTH
            other = s.other_function(1)
        """
    },
    "strings-that-only-mention-the-words": {
        "refvault/user.py": """
            \"\"\"A docstring may name refvault.toolbox.substitute.bind_refs and enter_frame.\"\"\"

            def run():
                "So may a function docstring: substitute:bind_refs."
                return ["bind refs", "substitutes", "admitted", "we substitute x", "refvault.toolbox.ref", "x.enter"]
        """
    },
    "other-methods-and-definitions-named-alike": {
        "refvault/user.py": """
            class Door:
                def admit(self):  # a definition is not a call
                    return self.admitted()

                def enter_frame(self):
                    return None
        """
    },
}


@pytest.mark.parametrize("files", NOT_THE_TARGET.values(), ids=NOT_THE_TARGET.keys())
def test_lookalikes_are_not_reported(tmp_path: Path, files: dict[str, str]) -> None:
    report = scan(build(tmp_path, files))
    assert report.ok, report.findings
    assert report.files_read == len({**BASE, **files})


# -- rule 2: the function used as a value --------------------------------------------

VALUE_USES = {
    "assigned": (
        "assigned",
        """
        from refvault.toolbox.substitute import bind_refs

        f = bind_refs  # hit: value-use
        """,
    ),
    "annotated-assignment": (
        "assigned",
        """
        from typing import Any
        from refvault.toolbox.substitute import bind_refs

        f: Any = bind_refs  # hit: value-use
        """,
    ),
    "walrus": (
        "assigned",
        """
        from refvault.toolbox.substitute import bind_refs

        if (f := bind_refs):  # hit: value-use
            pass
        """,
    ),
    "assigned-via-aliased-module": (
        "assigned",
        """
        import refvault.toolbox.substitute as s

        f = s.bind_refs  # hit: value-use
        """,
    ),
    "passed-to-map": (
        "passed as an argument",
        """
        from refvault.toolbox.substitute import bind_refs

        list(map(bind_refs, [], []))  # hit: value-use
        """,
    ),
    "passed-to-partial": (
        "passed as an argument",
        """
        from functools import partial
        from refvault.toolbox import substitute

        bound = partial(substitute.bind_refs, frame=None)  # hit: value-use
        """,
    ),
    "passed-by-keyword": (
        "passed as an argument",
        """
        from refvault.toolbox.substitute import bind_refs as b

        def run(fn):
            return fn

        run(fn=b)  # hit: value-use
        """,
    ),
    "returned": (
        "returned",
        """
        from refvault.toolbox.substitute import bind_refs

        def get():
            return bind_refs  # hit: value-use
        """,
    ),
    "yielded": (
        "returned",
        """
        from refvault.toolbox.substitute import bind_refs

        def get():
            yield bind_refs  # hit: value-use
        """,
    ),
    "lambda": (
        "returned",
        """
        from refvault.toolbox.substitute import bind_refs

        get = lambda: bind_refs  # hit: value-use
        """,
    ),
    "list": (
        "stored in a container",
        """
        from refvault.toolbox.substitute import bind_refs

        handlers = [bind_refs]  # hit: value-use
        """,
    ),
    "dict-value": (
        "stored in a container",
        """
        from refvault.toolbox.substitute import bind_refs

        handlers = {"bind": bind_refs}  # hit: value-use
        """,
    ),
    "tuple-and-set": (
        "stored in a container",
        """
        import refvault.toolbox.substitute

        pair = (refvault.toolbox.substitute.bind_refs, 1)  # hit: value-use
        group = {refvault.toolbox.substitute.bind_refs}  # hit: value-use
        """,
    ),
    "decorator": (
        "used as a decorator",
        """
        from refvault.toolbox.substitute import bind_refs

        @bind_refs  # hit: value-use
        def tool():
            pass
        """,
    ),
    "class-decorator-via-relative-module": (
        "used as a decorator",
        """
        from .toolbox import substitute

        @substitute.bind_refs  # hit: value-use
        class Tool:
            pass
        """,
    ),
    "default-argument": (
        "used as a default argument",
        """
        from refvault.toolbox.substitute import bind_refs

        def run(resolve=bind_refs):  # hit: value-use
            return resolve
        """,
    ),
    "attribute-of-the-function": (
        "attribute access",
        """
        from refvault.toolbox.substitute import bind_refs

        inner = bind_refs.__wrapped__  # hit: value-use
        """,
    ),
    "getattr-literal": (
        'getattr(…, "bind_refs")',
        """
        from refvault.toolbox import substitute

        f = getattr(substitute, "bind_refs")  # hit: value-use, value-use, dynamic-reference
        """,
    ),
    "getattr-literal-aliased-module-and-called": (
        'getattr(…, "bind_refs")',
        """
        import refvault.toolbox.substitute as s

        getattr(s, "bind_refs")(1, 2)  # hit: value-use, value-use, dynamic-reference
        """,
    ),
    "getattr-literal-relative-alias-with-default": (
        'getattr(…, "bind_refs")',
        """
        from . import substitute as sub

        f = getattr(sub, "bind_refs", None)  # hit: value-use, value-use, dynamic-reference
        """,
    ),
    "getattr-literal-dotted-module": (
        'getattr(…, "bind_refs")',
        """
        import refvault.toolbox.substitute

        f = getattr(refvault.toolbox.substitute, "bind_refs")  # hit: value-use, value-use, dynamic-reference
        """,
    ),
    "getattr-computed-name": (
        "computed name",
        """
        from refvault.toolbox import substitute

        name = "bind" + "_refs"
        f = getattr(substitute, name)  # hit: value-use, value-use
        """,
    ),
    "module-namespace": (
        "module namespace",
        """
        from refvault.toolbox import substitute

        f = vars(substitute)["bind_refs"]  # hit: value-use, value-use, dynamic-reference
        g = substitute.__dict__["bind_refs"]  # hit: value-use, value-use, dynamic-reference
        """,
    ),
}


@pytest.mark.parametrize(("kind", "source"), VALUE_USES.values(), ids=VALUE_USES.keys())
def test_value_use_is_reported(tmp_path: Path, kind: str, source: str) -> None:
    where = "refvault/toolbox/user.py" if "from . import" in source else "refvault/user.py"
    report = check(tmp_path, {where: source})
    for line in {f.line for f in report.findings}:  # every marked line has a finding of the stated kind
        assert any(kind in f.message for f in report.findings if f.line == line), report.findings


def test_value_use_inside_the_allowed_function_is_still_reported(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/toolbox.py": """
            from refvault.toolbox.substitute import bind_refs

            class Toolbox:
                def _prepare(self, validated, frame):
                    keep = bind_refs  # hit: value-use
                    return bind_refs(validated, frame)
        """
    }
    check(tmp_path, files, **NO_FRAME)


# -- dynamic lookups: strings that name a target, and the module object as a value ---

DYNAMIC_LOOKUPS = {
    "sys-modules": """
        import sys

        sys.modules["refvault.toolbox.substitute"].bind_refs(1, 2)  # hit: dynamic-reference, unallowed-call
    """,
    "dunder-import-fromlist": """
        m = __import__(
            "refvault.toolbox.substitute",  # hit: dynamic-reference
            fromlist=["bind_refs"],  # hit: dynamic-reference
        )
    """,
    "module-dict-get": """
        from refvault.toolbox import substitute

        f = substitute.__dict__.get("bind_refs")  # hit: value-use, dynamic-reference
    """,
    "vars-get": """
        from refvault.toolbox import substitute

        f = vars(substitute).get("bind_refs")  # hit: value-use, dynamic-reference
    """,
    "attrgetter": """
        import operator

        get = operator.attrgetter("bind_refs")  # hit: dynamic-reference
    """,
    "pkgutil-resolve-name": """
        import pkgutil

        f = pkgutil.resolve_name("refvault.toolbox.substitute:bind_refs")  # hit: dynamic-reference
    """,
    "import-module-by-keyword": """
        import importlib

        m = importlib.import_module(name="refvault.toolbox.substitute")  # hit: dynamic-reference
    """,
    "import-module-relative": """
        from importlib import import_module

        m = import_module(".substitute", "refvault.toolbox")  # hit: dynamic-reference
        m.bind_refs(1, 2)  # hit: unallowed-call
    """,
    "import-module-relative-then-attribute": """
        from importlib import import_module

        import_module(".substitute", "refvault.toolbox").bind_refs(1, 2)  # hit: dynamic-reference, unallowed-call
    """,
    "globals": """
        from refvault.toolbox.substitute import bind_refs

        globals()["bind_refs"](1, 2)  # hit: dynamic-reference
    """,
    "bytes-and-f-string-parts": """
        a = b"bind_refs"  # hit: dynamic-reference
        b = f"refvault.toolbox.substitute{''}"  # hit: dynamic-reference
    """,
    "frame-names": """
        import refvault.toolbox.ref as ref

        enter = getattr(ref, "enter_frame")  # hit: value-use, value-use, dynamic-reference
        getattr(object(), "admit")  # hit: dynamic-reference
    """,
    "unresolvable-holder": """
        def run(module, frame):
            module.bind_refs(1, frame)  # hit: unallowed-call
            module.enter_frame(frame)  # hit: unallowed-call
    """,
    "module-passed-and-stored": """
        from refvault.toolbox import substitute
        import refvault.toolbox.ref as ref

        def run(fn):
            return fn

        run(substitute)  # hit: value-use
        table = {"m": substitute}  # hit: value-use
        names = vars(ref)  # hit: value-use
        loader = ref.__loader__  # hit: value-use
        frame_type = ref.DispatchFrame
    """,
    "target-rebound": """
        from refvault.toolbox import substitute

        substitute.bind_refs = print  # hit: value-use
    """,
}


@pytest.mark.parametrize("source", DYNAMIC_LOOKUPS.values(), ids=DYNAMIC_LOOKUPS.keys())
def test_dynamic_lookup_is_reported(tmp_path: Path, source: str) -> None:
    check(tmp_path, {"refvault/user.py": source})


def test_strings_are_exempt_in_the_target_module_and_in_docstrings(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/substitute.py": SUBSTITUTE + 'NAME = "bind_refs"\n',  # the home module
        "refvault/toolbox/ref.py": REF + 'NAMES = ("enter_frame", "admit")\n',
        "refvault/user.py": (
            '"""Uses refvault.toolbox.substitute:bind_refs."""\n\nx = "substitute"  # hit: dynamic-reference\n'
        ),
    }
    check(tmp_path, files)


def test_a_dynamic_reference_site_can_be_allowed_and_goes_stale(tmp_path: Path) -> None:
    files = {"refvault/user.py": 'def names():\n    return ["bind_refs"]\n'}
    allow = {**ALLOWED_DYNAMIC_SITES, "refvault/user.py:names": "a documented exception"}
    assert scan(build(tmp_path, files), allow_dynamic=allow).ok
    stale = {**allow, "refvault/user.py:gone": "removed"}
    assert located(scan(build(tmp_path, files), allow_dynamic=stale)) == [("refvault/user.py", 0, "stale-allow")]


# -- the frame targets: DispatchFrame.admit (by name) and enter_frame (by alias) ------

FRAME_FORMS = {
    "admit-anywhere": {
        "refvault/user.py": """
            def sneak(frame, descriptor):
                frame.admit("art_x", descriptor)  # hit: unallowed-call
        """
    },
    "admit-on-any-object": {
        "refvault/user.py": """
            class Thing:
                def go(self, d):
                    self.frame.admit(1, d)  # hit: unallowed-call
                    other().admit(1, d)  # hit: unallowed-call
        """
    },
    "admit-elsewhere-in-substitute": {
        "refvault/toolbox/substitute.py": SUBSTITUTE
        + textwrap.dedent("""
            def _another(frame):
                frame.admit(1, None)  # hit: unallowed-call
        """)
    },
    "admit-inside-ref": {
        "refvault/toolbox/ref.py": REF
        + textwrap.dedent("""
            def shortcut(frame):
                frame.admit(1, None)  # hit: unallowed-call
        """)
    },
    "admit-as-a-value": {
        "refvault/user.py": """
            def sneak(frame):
                put = frame.admit  # hit: value-use
                return put
        """
    },
    "enter-frame-direct": {
        "refvault/user.py": """
            from refvault.toolbox.ref import enter_frame

            def sneak(frame):
                return enter_frame(frame)  # hit: unallowed-call
        """
    },
    "enter-frame-module-alias": {
        "refvault/toolbox/user.py": """
            from . import ref as r

            r.enter_frame(None)  # hit: unallowed-call
        """
    },
    "enter-frame-star-and-re-export": {
        "refvault/toolbox/__init__.py": "from .ref import enter_frame as open_frame\n",
        "refvault/user.py": """
            from refvault.toolbox.ref import *
            from refvault.toolbox import open_frame

            enter_frame(None)  # hit: unallowed-call
            open_frame(None)  # hit: unallowed-call
        """,
    },
    "enter-frame-as-a-value": {
        "refvault/user.py": """
            from refvault.toolbox.ref import enter_frame

            hooks = [enter_frame]  # hit: value-use
        """
    },
    "enter-frame-in-another-toolbox-method": {
        "refvault/toolbox/toolbox.py": TOOLBOX
        + textwrap.indent(
            textwrap.dedent("""
                def _later(self, frame):
                    return enter_frame(frame)  # hit: unallowed-call
            """),
            "    ",
        )
    },
}


@pytest.mark.parametrize("files", FRAME_FORMS.values(), ids=FRAME_FORMS.keys())
def test_frame_target_is_guarded(tmp_path: Path, files: dict[str, str]) -> None:
    report = check(tmp_path, files)
    for finding in report.findings:
        if finding.rule == "unallowed-call":
            assert ENTER_FRAME in finding.message or ADMIT in finding.message


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line)


def test_frame_targets_have_their_own_allow_lists(tmp_path: Path) -> None:
    """An entry on one target's list does not allow another target, and each list goes stale on its own."""
    report = scan(build(tmp_path, {}), allow_admit={ALLOWED_SITE: "wrong list"}, allow_enter_frame={})
    assert located(report) == [
        ("refvault/toolbox/substitute.py", line_of(SUBSTITUTE, ".admit("), "unallowed-call"),  # not allowed now
        ("refvault/toolbox/toolbox.py", 0, "stale-allow"),
        ("refvault/toolbox/toolbox.py", line_of(TOOLBOX, "enter_frame(frame)"), "unallowed-call"),  # Toolbox.call
        ("refvault/toolbox/toolbox.py", line_of(TOOLBOX, "enter_frame(frame)") + 4, "unallowed-call"),  # call_sync
    ]
    stale = next(f for f in report.findings if f.rule == "stale-allow")
    assert ADMIT in stale.message
    assert ALLOWED_SITE in stale.message


def test_frame_allow_lists_go_stale_when_the_calls_move(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/substitute.py": SUBSTITUTE.replace("def _resolve(", "def _resolve_one("),
        "refvault/toolbox/toolbox.py": TOOLBOX.replace("def call_sync(", "def call_blocking("),
    }
    report = scan(build(tmp_path, files))
    assert located(report) == [
        ("refvault/toolbox/substitute.py", 0, "stale-allow"),
        ("refvault/toolbox/substitute.py", line_of(SUBSTITUTE, ".admit("), "unallowed-call"),
        ("refvault/toolbox/toolbox.py", 0, "stale-allow"),
        ("refvault/toolbox/toolbox.py", line_of(TOOLBOX, "enter_frame(frame)") + 4, "unallowed-call"),
    ]


# -- rule 3: the allow-list itself ---------------------------------------------------


def test_stale_entry_for_a_missing_file(tmp_path: Path) -> None:
    allow = {ALLOWED_SITE: "the dispatcher", "refvault/gone.py:run": "was removed"}
    report = scan(build(tmp_path, {}), allow)
    assert located(report) == [("refvault/gone.py", 0, "stale-allow")]
    assert "refvault/gone.py:run" in report.findings[0].message


def test_stale_entry_when_the_allowed_call_moves(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/toolbox.py": """
            from refvault.toolbox.substitute import bind_refs

            class Toolbox:
                def _dispatch(self, validated, frame):
                    return bind_refs(validated, frame)
        """
    }
    report = scan(build(tmp_path, files), **NO_FRAME)  # the default allow-list still names Toolbox._prepare
    assert sorted((f.line, f.rule) for f in report.findings) == [(0, "stale-allow"), (6, "unallowed-call")]


def test_stale_entry_when_the_call_becomes_a_value_use(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/toolbox.py": """
            from refvault.toolbox import substitute

            class Toolbox:
                def _prepare(self, validated, frame):
                    resolve = getattr(substitute, "bind_refs")
                    return resolve(validated, frame)
        """
    }
    report = scan(build(tmp_path, files), **NO_FRAME)
    assert sorted((f.line, f.rule) for f in report.findings) == [
        (0, "stale-allow"),
        (6, "dynamic-reference"),
        (6, "value-use"),  # getattr(…, "bind_refs")
        (6, "value-use"),  # the module passed as an argument
    ]


def test_a_call_through_an_assigned_alias_still_counts_as_a_call(tmp_path: Path) -> None:
    files = {
        "refvault/toolbox/toolbox.py": """
            from refvault.toolbox.substitute import bind_refs

            class Toolbox:
                def _prepare(self, validated, frame):
                    resolve = bind_refs  # hit: value-use
                    return resolve(validated, frame)

            def elsewhere(validated, frame):
                resolve = bind_refs  # hit: value-use
                return resolve(validated, frame)  # hit: unallowed-call
        """
    }
    report = check(tmp_path, files, **NO_FRAME)
    assert report.allowed_calls == tuple(sorted((ALLOWED_SITE, ADMIT_SITE)))


@pytest.mark.parametrize("reason", ["", "   \n"])
def test_empty_reason_is_an_error(tmp_path: Path, reason: str) -> None:
    report = scan(build(tmp_path, {}), {ALLOWED_SITE: reason})
    assert located(report) == [("refvault/toolbox/toolbox.py", 0, "empty-reason")]
    assert not report.ok


def test_malformed_key_is_an_error(tmp_path: Path) -> None:
    report = scan(build(tmp_path, {}), {ALLOWED_SITE: "the dispatcher", "refvault/toolbox/toolbox.py": "no function"})
    assert [f.rule for f in report.findings] == ["bad-allow-key"]


# -- rule 4: unparsable files --------------------------------------------------------


def test_syntax_error_is_a_failure_not_a_skip(tmp_path: Path) -> None:
    files = {"refvault/broken.py": "x = 1\ndef broken(:  # hit: unparsable\n    pass\n"}
    report = check(tmp_path, files)
    assert report.files_read == len(BASE) + 1  # it was read, and counted
    assert "does not parse" in report.findings[0].message


def test_null_bytes_are_a_failure(tmp_path: Path) -> None:
    root = build(tmp_path, {})
    (root / "binary.py").write_bytes(b"x = 1\x00\n")
    report = scan(root)
    assert [(f.path, f.rule) for f in report.findings] == [("refvault/binary.py", "unparsable")]


def test_bad_encoding_is_a_failure(tmp_path: Path) -> None:
    root = build(tmp_path, {})
    (root / "latin.py").write_bytes(b"x = '\xff\xfe'\n")
    report = scan(root)
    assert [(f.path, f.rule) for f in report.findings] == [("refvault/latin.py", "unparsable")]


def test_other_files_are_still_checked_next_to_a_broken_one(tmp_path: Path) -> None:
    files = {
        "refvault/a_broken.py": "def (:  # hit: unparsable\n",
        "refvault/z_user.py": "from refvault.toolbox.substitute import bind_refs as b\nb()  # hit: unallowed-call\n",
    }
    check(tmp_path, files)


# -- scope, order, summary -----------------------------------------------------------


def test_test_files_outside_any_package_are_not_scanned(tmp_path: Path) -> None:
    """A repo-level ``tests/`` directory next to the package (scanning the directory that holds both) is skipped."""
    call = "from refvault.toolbox.substitute import bind_refs\nbind_refs(1, 2)\nf = bind_refs\n"
    ignored = {
        "tests/test_user.py": call,
        "tests/helper.py": call,
        "tests/deep/nested.py": "def (:\n",
        "test_top.py": "def (:\n",
    }
    build(tmp_path, ignored)
    report = scan(tmp_path)
    assert report.ok, report.findings
    assert report.files_read == len(BASE)
    assert not scan(tmp_path / "tests").ok  # pointed at directly, nothing is hidden: the files are read


def test_test_looking_files_inside_the_package_are_scanned(tmp_path: Path) -> None:
    call = "from refvault.toolbox.substitute import bind_refs\nbind_refs(1, 2)  # hit: unallowed-call\n"
    files = {
        "refvault/test_user.py": call,
        "refvault/toolbox/test_more.py": "def (:  # hit: unparsable\n",
        "refvault/evade/__init__.py": "",
        "refvault/evade/test_helpers.py": call,
        "refvault/tests/helper.py": call,  # no __init__.py: still importable as refvault.tests.helper
        "refvault/tests/deep/test_nested.py": call,
        "refvault/tests/deep/relative.py": (
            "from ...toolbox.substitute import bind_refs as b\nb()  # hit: unallowed-call\n"
        ),
    }
    report = check(tmp_path, files)
    assert report.files_read == len(BASE) + len(files)
    assert located(scan(tmp_path)) == located(report)  # same when scanning the directory above the package


def test_unlistable_directory_is_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = build(tmp_path, {"refvault/locked/hidden.py": "from refvault.toolbox.substitute import bind_refs\n"})
    locked = root / "locked"
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = scan(root)
    assert located(report) == [("refvault/locked", 0, "unparsable")]
    assert "cannot be listed" in report.findings[0].message


def test_symlinked_directory_is_a_failure(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "user.py").write_text("from refvault.toolbox.substitute import bind_refs\nbind_refs()\n")
    root = build(tmp_path, {})
    (root / "linked").symlink_to(outside, target_is_directory=True)
    report = scan(root)
    assert located(report) == [("refvault/linked", 0, "unparsable")]


def test_names_that_only_look_like_tests_are_scanned(tmp_path: Path) -> None:
    call = "from refvault.toolbox.substitute import bind_refs\nbind_refs(1, 2)  # hit: unallowed-call\n"
    files = {
        "refvault/tests.py": call,
        "refvault/user_test_helpers.py": call,
        "refvault/latest/tests_data.py": call,
    }
    check(tmp_path, files)


def test_order_is_sorted_and_deterministic(tmp_path: Path) -> None:
    use = "from refvault.toolbox.substitute import bind_refs\n"
    files = {  # written in reverse order, several findings per file, two on one line
        "refvault/zz.py": use + "bind_refs(1, 2)  # hit: unallowed-call\n",
        "refvault/mm/__init__.py": "",
        "refvault/mm/b.py": use + "\n\nf = bind_refs  # hit: value-use\nbind_refs(1, 2)  # hit: unallowed-call\n",
        "refvault/aa.py": use + "x = [bind_refs, bind_refs]\n",
    }
    report = scan(build(tmp_path, files), {ALLOWED_SITE: "the dispatcher", "refvault/aa.py:gone": "stale"})
    keys = [(f.path, f.line, f.col) for f in report.findings]
    assert keys == sorted(keys)
    assert keys[:3] == [("refvault/aa.py", 0, 0), ("refvault/aa.py", 2, 6), ("refvault/aa.py", 2, 17)]
    assert [f.path for f in report.findings][-1] == "refvault/zz.py"
    assert report.findings == scan(tmp_path / "refvault", {ALLOWED_SITE: "x", "refvault/aa.py:gone": "y"}).findings


def test_empty_tree_fails(tmp_path: Path) -> None:
    report = scan(tmp_path, {}, allow_enter_frame={}, allow_admit={}, allow_dynamic={})
    assert report.files_read == 0
    assert [f.rule for f in report.findings] == ["empty-scan"]


def test_deeply_nested_expression_is_handled(tmp_path: Path) -> None:
    deep = "+".join(["1"] * 1500)  # parses, and is deeper than a recursive walk could go
    too_deep = "+".join(["1"] * 100_000)  # the parser itself gives up: reported, not a crash
    files = {"refvault/deep.py": f"x = {deep}\n", "refvault/deeper.py": f"x = {too_deep}\n"}
    report = scan(build(tmp_path, files))
    assert [(f.path, f.rule) for f in report.findings] == [("refvault/deeper.py", "unparsable")]


def test_cli_prints_one_line_per_finding_and_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {
        "refvault/user.py": "from refvault.toolbox.substitute import bind_refs\nbind_refs(1, 2)\nf = bind_refs\n",
        "refvault/broken.py": "def (:\n",
    }
    root = build(tmp_path, files)
    assert main([str(root)]) == 1
    lines = capsys.readouterr().out.splitlines()
    report = scan(root)
    assert lines[:-1] == [str(f) for f in report.findings]
    assert len(lines) == 4
    assert lines[0].startswith("refvault/broken.py:1:")
    assert f"{len(BASE) + 2} file(s) read" in lines[-1]
    assert "3 finding(s)" in lines[-1]


def test_cli_exit_zero_when_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(build(tmp_path, {}))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert "clean" in lines[0]


def test_cli_rejects_a_missing_root(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2


def test_finding_renders_as_path_line_col_rule_message() -> None:
    finding = Finding("refvault/x.py", 3, 5, "value-use", "message")
    assert str(finding) == "refvault/x.py:3:5: value-use: message"
