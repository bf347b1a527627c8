"""``refvault demo``: the click command. Importing this module loads click and the CLI's helpers only."""

from __future__ import annotations

import click

from refvault.cli.console import open_store
from refvault.cli.options import explicit_store, json_option, main_store_option

__all__ = ["demo"]


@click.command()
@main_store_option
@json_option
@click.pass_context
def demo(ctx: click.Context, as_json: bool) -> None:
    """Investigate an incident end to end: a scripted model over the real runtime.

    \b
    1. capture     a diagnostic tool captures 12,840 eu-west events as an
                   artifact; the model gets a preview (id, coverage,
                   omissions), not the records
    2. absence     severity = critical: 0 matches, scan complete; the
                   evidence gate allows that bounded conclusion, not a wider one
    3. pinned      a re-capture under the same filename is a new artifact; a
                   read by the first id still returns the original bytes
    4. screenshot  an MCP tool's PNG, through the gateway, reaches the model
                   as a refvault:// link, never as base64
    5. runbook     a sealed runbook is summarised by reference and enters no
                   request; a tool echoing it is stopped by the leak guard
    6. restart     a partition leaves us-east out: the capture is partial,
                   the evidence gate refuses the restart, the model defers it

    Only the model's decisions are scripted; the Toolbox, vault, reads, MCP
    gateway, guard and evidence gate are the real ones. Prints a transcript
    and an evidence report (--json: the same as one JSON document).

    The store is a temporary directory, removed afterwards, unless --store is
    given (kept). Step 4 needs the mcp extra (pip install 'refvault[mcp]'):
    it runs the MCP server installed with refvault (python -m
    refvault.demo.incident_mcp_server). Exits 1 if any step's check fails.
    """
    from refvault.demo import run_demo
    from refvault.guard.warm import warm

    warm()  # the guard's kernels: compiled here, saying so, if this machine has not yet (not mid-transcript)
    code = run_demo(explicit_store(ctx), as_json, open_vault=open_store)
    if code:
        ctx.exit(code)
