"""Fixtures of the integration tests: every adapter runs on one embedded store."""

from __future__ import annotations

import pytest

from refvault import Vault


@pytest.fixture
def vault(embedded_vault: Vault) -> Vault:
    """Every adapter test runs on one embedded store."""
    return embedded_vault
