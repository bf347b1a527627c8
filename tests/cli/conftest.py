"""Every CLI test starts from an environment that names no store, scope or terminal width of its own."""

from __future__ import annotations

import pytest

_ENVIRONMENT = (
    "REFVAULT_STORE",
    "REFVAULT_CATALOG",
    "REFVAULT_BLOBS",
    "REFVAULT_TENANT",
    "REFVAULT_USER",
    "REFVAULT_SESSION",
    "COLUMNS",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
