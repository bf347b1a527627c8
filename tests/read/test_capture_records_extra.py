"""``capture_records`` given something other than a pyarrow Table or a pandas DataFrame (e.g. without pandas
installed): a typed error that names the extra to install."""

from __future__ import annotations

import pytest

from refvault.errors import InvalidArgument
from refvault.model import Scope
from refvault.read import capture_records
from refvault.vault import Vault


@pytest.mark.parametrize("value", [[{"a": 1}], {"a": [1]}, "a,b\n1,2\n"])
def test_a_value_that_is_not_a_table_names_the_dataframes_extra(value: object) -> None:
    scope = Scope("t", "u", "s")
    with Vault.open("memory://") as vault:
        with pytest.raises(InvalidArgument) as caught:
            capture_records(vault, scope, value)
        assert vault.list(scope) == []  # nothing was stored
    message = str(caught.value)
    assert message.startswith("capture_records takes a pyarrow.Table or a pandas.DataFrame")
    assert 'pip install "refvault[dataframes]"' in message
