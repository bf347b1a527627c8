"""``python -m refvault.cli``: the ``refvault`` command, exactly as the console script runs it."""

from refvault.cli.entry import run

run()
