"""Types, the error tree, the public surface and the cost of importing refvault."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import refvault
from refvault import errors
from refvault.model import Principal, Scope, canonical_media_type, selectors_for


def test_scope_validates_every_component() -> None:
    assert Scope("acme", "ana@example.com", "s-1:2").user == "ana@example.com"
    for bad in ["", "a/b", "..", ".hidden", "x" * 129, "a b", "a\x00", "é"]:
        with pytest.raises(errors.InvalidScope):
            Scope(bad, "u", "s")
        with pytest.raises(errors.InvalidScope):
            Scope("t", bad, "s")
        with pytest.raises(errors.InvalidScope):
            Scope("t", "u", bad)


def test_principal_allows_only_its_tenant_user_and_sessions() -> None:
    p = Principal("acme", "ana", frozenset({"s1"}))
    assert p.allows(Scope("acme", "ana", "s1"))
    assert not p.allows(Scope("acme", "ana", "s2"))
    assert not p.allows(Scope("globex", "ana", "s1"))
    assert Principal("acme", "ana").allows(Scope("acme", "ana", "anything"))


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("Text/Plain", "text/plain"),
        ("text/plain;charset=UTF-8", "text/plain; charset=UTF-8"),
        ("application/json ; b=2; A=1", "application/json; a=1; b=2"),
        ("image/svg+xml", "image/svg+xml"),
    ],
)
def test_media_types_are_canonicalised(given: str, canonical: str) -> None:
    assert canonical_media_type(given) == canonical


def test_selectors_list_only_reads_that_exist() -> None:
    assert selectors_for("image/png") == ["byte_range"]
    assert selectors_for("text/plain; charset=utf-8") == ["byte_range", "lines", "grep"]
    assert selectors_for("application/x-ndjson") == ["byte_range", "lines", "grep", "records"]
    assert selectors_for("application/vnd.apache.parquet") == ["byte_range", "records"]


def test_the_error_tree_is_drawn_in_the_module_docstring_and_matches_the_classes() -> None:
    doc = errors.__doc__ or ""
    classes = {name: getattr(errors, name) for name in errors.__all__}
    for name, cls in classes.items():
        assert name in doc, name
        assert issubclass(cls, errors.RefvaultError)
    assert issubclass(errors.InvalidScope, errors.InvalidArgument)
    assert issubclass(errors.InvalidArgument, ValueError)
    assert issubclass(errors.NotFound, LookupError)
    assert not issubclass(errors.Expired, errors.NotFound)


def test_public_names_resolve() -> None:
    for name in refvault.__all__:
        assert getattr(refvault, name) is not None
    with pytest.raises(AttributeError):
        refvault.NoSuchThing  # noqa: B018


def test_import_refvault_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, refvault\n"
        "heavy = [m for m in ('sqlalchemy', 'rich', 'click', 'hashlib', 'sqlite3', 'threading') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out in ("", "threading"), out  # threading may be preloaded by the interpreter itself


def test_async_vault_uses_the_same_implementation(tmp_path: Path) -> None:
    async def main() -> None:
        async with await refvault.AsyncVault.open(str(tmp_path / "store")) as vault:
            scope = Scope("acme", "ana", "s1")
            d = await vault.put(scope, b"z" * 3_000_000, media_type="application/octet-stream")
            assert await vault.read_bytes(scope, d.artifact_id) == b"z" * 3_000_000
            chunks = [c async for c in vault.stream(scope, d.artifact_id)]
            assert b"".join(chunks) == b"z" * 3_000_000
            assert [x.artifact_id for x in await vault.list(scope)] == [d.artifact_id]
            assert (await vault.verify()).ok
            await vault.delete(scope, d.artifact_id)
            with pytest.raises(errors.NotFound):
                await vault.describe(scope, d.artifact_id)

    asyncio.run(main())
