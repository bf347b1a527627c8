"""``python -m refvault.cli``: the ``refvault`` command."""

from refvault.cli.group import main

main(prog_name="refvault")
