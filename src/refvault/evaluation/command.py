"""``refvault eval``: the click command. Importing this module loads click only."""

from __future__ import annotations

import json

import click

from refvault.cli.options import STORE_KEY, store_option

__all__ = ["eval_command"]


@click.command("eval")
@click.option("--seed", type=int, default=None, help="Seed of the generated data and attempts (default: 20261106).")
@click.option(
    "--trials",
    type=click.IntRange(1, 100),
    default=None,
    metavar="N",
    help="Run the whole battery N times, each on fresh seeded data (default: 2).",
)
@store_option("Embedded store to run in (created if missing, kept). Default: a fresh temporary store, removed after.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@click.pass_context
def eval_command(ctx: click.Context, seed: int | None, trials: int | None, as_json: bool) -> None:
    """Measure the safety properties against this build and print the counts.

    \b
    identity substitution   second captures, swapped reads, replayed cursors,
                            damaged bytes: each must be detected
    unauthorised disclosure cross-scope reads, sealed reads through model tools,
                            forged cursors, leaks at the LLM edge, foreign Refs:
                            each must be blocked, and no planted canary may reach
                            an observation, error, event, audit or log record or
                            a model request
    false absence           "no matches" may only be concluded from a complete scan
                            of a capture without omissions
    omissions reported      every response about a partial capture carries them
    evidence gate           unfit evidence must be refused; nothing unfit committed

    Also reported, never asserted: latency per read, tokens returned per read,
    records scanned per query, bytes retained, a long run (200 tool calls of
    2-40 KB, a model going back to earlier results) with and without the context
    working set: peak and total request tokens, reloads, thrash; and a mis-copy
    run (1,000 ids with one or two characters corrupted: the share detected as
    mis-copied and the share given the original id as the suggestion). Runs offline on the embedded
    default; $REFVAULT_STORE is not used (the eval plants canaries and damages
    blobs, then restores them). Exits 1 on any disclosure, unsupported
    required-evidence commit or false absence conclusion; else 0.
    """
    from refvault.cli.console import cli_error, make_console
    from refvault.errors import RefvaultError
    from refvault.evaluation.run import DEFAULT_SEED, DEFAULT_TRIALS, run_eval
    from refvault.guard.warm import warm

    warm()  # the guard's kernels: compiled here, saying so, if this machine has not yet (the run captures logs)
    store: str | None = ctx.meta.get(STORE_KEY)
    try:
        report = run_eval(
            seed=DEFAULT_SEED if seed is None else seed,
            store=store,
            trials=DEFAULT_TRIALS if trials is None else trials,
        )
    except RefvaultError as exc:  # bad input exits 2, anything else 1; the store is named, errno noise dropped
        raise cli_error(exc, f"cannot run the eval on store {store}: " if store else "") from None
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        console = make_console(soft_wrap=True)
        for renderable in report.renderables():
            console.print(renderable)
    if report.exit_code:
        ctx.exit(report.exit_code)
