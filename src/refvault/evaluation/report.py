"""What ``refvault eval`` found: counts per property, the release-blocking totals, figures, and their renderings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refvault.evaluation.world import Attempt

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["DISCLOSURE_KINDS", "EvalReport"]

DISCLOSURE_KINDS = {
    "cross_scope": "cross-scope reads",
    "sealed": "sealed reads through model tools",
    "cursor": "forged and replayed cursors",
    "llm_edge": "leaks at the LLM edge",
    "foreign_ref": "Refs to another scope's ids",
}


def _of(attempts: Iterable[Attempt], prop: str) -> list[Attempt]:
    return [a for a in attempts if a.prop == prop]


@dataclass(slots=True)
class EvalReport:
    """The outcome of one eval run. ``exit_code`` is 1 if anything release-blocking happened, else 0.

    Release-blocking: an unauthorised disclosure (canary bytes in any sink, or
    another scope's artifact distinguishable from an absent one), an
    unsupported required-evidence commit, or a false absence conclusion.
    """

    seed: int
    trials: int
    store: str | None  # the kept store; None when a temporary store was used and removed
    attempts: list[Attempt]
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    stray: tuple[str, ...] = ()  # sinks holding canaries outside every attempt (setup): also a disclosure

    # -- counts ------------------------------------------------------------------------------------

    @property
    def disclosures(self) -> int:
        return sum(a.disclosed for a in self.attempts) + (1 if self.stray else 0)

    @property
    def unsupported_commits(self) -> int:
        return sum(a.unsupported for a in self.attempts)

    @property
    def false_absences(self) -> int:
        return sum(a.false_absence for a in self.attempts)

    @property
    def ok(self) -> bool:
        return not (self.disclosures or self.unsupported_commits or self.false_absences)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.ok]

    def properties(self) -> dict[str, dict[str, Any]]:
        identity = _of(self.attempts, "identity")
        disclosure = _of(self.attempts, "disclosure")
        absence = _of(self.attempts, "absence")
        omissions = _of(self.attempts, "omissions")
        gate = _of(self.attempts, "gate")
        refusals = [a for a in gate if not a.control]
        controls = [a for a in gate if a.control]
        drawn = sum(bool(a.concluded) for a in absence)
        return {
            "identity_substitution": {
                "attempts": len(identity),
                "detected": sum(a.ok for a in identity),
                "failures": sum(not a.ok for a in identity),
            },
            "unauthorised_disclosure": {
                "attempts": len(disclosure),
                "blocked": sum(a.ok for a in disclosure),
                "disclosed": sum(a.disclosed for a in disclosure),
                "failures": sum(not a.ok for a in disclosure),
                "by_kind": {
                    kind: {
                        "attempts": len(of_kind),
                        "blocked": sum(a.ok for a in of_kind),
                        "disclosed": sum(a.disclosed for a in of_kind),
                    }
                    for kind in DISCLOSURE_KINDS
                    for of_kind in [[a for a in disclosure if a.kind == kind]]
                },
            },
            "false_absence": {
                "answers": len(absence),
                "conclusions_drawn": drawn,
                "false_conclusions": sum(a.false_absence for a in absence),
                "withheld": len(absence) - drawn,
                "controls": sum(a.control for a in absence),
                "failures": sum(not a.ok for a in absence),
            },
            "omissions_reported": {
                "responses": len(omissions),
                "carried": sum(a.ok for a in omissions),
                "failures": sum(not a.ok for a in omissions),
            },
            "evidence_gate": {
                "attempts": len(refusals),
                "caught": sum(a.ok for a in refusals),
                "unsupported_commits": sum(a.unsupported for a in gate),
                "controls": len(controls),
                "supported_commits": sum(bool(a.committed) for a in controls),
                "failures": sum(not a.ok for a in gate),
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "seed": self.seed,
            "trials": self.trials,
            "store": self.store,
            "store_kept": self.store is not None,
            "seconds": round(self.seconds, 3),
            "release_blocking": {
                "disclosures": self.disclosures,
                "unsupported_commits": self.unsupported_commits,
                "false_absences": self.false_absences,
                "stray_sinks": list(self.stray),
            },
            "properties": self.properties(),
            "figures": self.figures,
            "failures": [a.to_dict() for a in self.failures],
            "attempts": [a.to_dict() for a in self.attempts],
        }

    # -- rendering ---------------------------------------------------------------------------------

    def renderables(self) -> list[RenderableType]:
        from rich.table import Table
        from rich.text import Text

        p = self.properties()
        table = Table(title=f"refvault eval: seed {self.seed}, {self.trials} trial(s)", title_justify="left")
        table.add_column("property", no_wrap=True)
        table.add_column("attempts", justify="right", no_wrap=True)
        table.add_column("held")
        table.add_column("failures", justify="right", no_wrap=True)
        table.add_column("release-blocking", no_wrap=True)

        def blocking(count: int, what: str) -> Text:
            return Text(f"{count} {what}", style="bold red" if count else "green")

        def fails(count: int) -> Text:
            return Text(str(count), style="bold red" if count else "")

        ident = p["identity_substitution"]
        table.add_row(
            "identity substitution",
            str(ident["attempts"]),
            f"{ident['detected']} detected",
            fails(ident["failures"]),
            "—",
        )
        disc = p["unauthorised_disclosure"]
        table.add_row(
            "unauthorised disclosure",
            str(disc["attempts"]),
            f"{disc['blocked']} blocked",
            fails(disc["failures"]),
            blocking(disc["disclosed"], "disclosed"),
        )
        for kind, label in DISCLOSURE_KINDS.items():
            row = disc["by_kind"][kind]
            table.add_row(
                Text(f"  {label}", style="dim"),
                str(row["attempts"]),
                f"{row['blocked']} blocked",
                fails(row["attempts"] - row["blocked"]),
                Text(f"{row['disclosed']} disclosed", style="bold red" if row["disclosed"] else "dim"),
            )
        absent = p["false_absence"]
        table.add_row(
            "false absence conclusions",
            str(absent["answers"]),
            f"{absent['withheld']} withheld, {absent['conclusions_drawn'] - absent['false_conclusions']} true absences",
            fails(absent["failures"]),
            blocking(absent["false_conclusions"], "false absences"),
        )
        om = p["omissions_reported"]
        table.add_row(
            "omissions reported", str(om["responses"]), f"{om['carried']} carried", fails(om["failures"]), "—"
        )
        gate = p["evidence_gate"]
        table.add_row(
            "required-evidence gate",
            str(gate["attempts"] + gate["controls"]),
            f"{gate['caught']} refused; {gate['supported_commits']}/{gate['controls']} controls committed",
            fails(gate["failures"]),
            blocking(gate["unsupported_commits"], "unsupported commits"),
        )
        out: list[RenderableType] = [table]
        if self.failures:
            failed = Table(title="failures", title_justify="left")
            for column in ("property", "attempt", "outcome", "trial"):
                failed.add_column(column)
            for a in self.failures:
                failed.add_row(
                    a.prop, a.name, a.outcome + (f" (in {', '.join(a.sinks)})" if a.sinks else ""), str(a.trial)
                )
            out.append(failed)
        out.append(self._figures_table())
        out.extend(self._figure_lines())
        verdict = (
            f"{self.disclosures} disclosures, {self.unsupported_commits} unsupported commits, "
            f"{self.false_absences} false absences in {self.seconds:.1f} s"
        )
        if self.stray:
            verdict += f"; canaries outside any attempt in: {', '.join(self.stray)}"
        store = f"store kept at {self.store}" if self.store else "temporary store removed"
        if self.ok:
            out.append(Text(f"eval passed: {verdict} ({store})", style="bold green"))
        else:
            out.append(Text(f"eval FAILED (release-blocking): {verdict} ({store})", style="bold red"))
        return out

    def _figures_table(self) -> RenderableType:
        from rich.table import Table

        table = Table(title="latency per read (time.perf_counter; reported, not asserted)", title_justify="left")
        table.add_column("read")
        table.add_column("calls", justify="right")
        table.add_column("median ms", justify="right")
        table.add_column("p95 ms", justify="right")
        for op, spread in self.figures.get("latency_ms", {}).items():
            table.add_row(op, str(spread["calls"]), _ms(spread["median"]), _ms(spread["p95"]))
        return table

    def _figure_lines(self) -> list[RenderableType]:
        from rich.text import Text

        tokens = self.figures.get("tokens_returned", {})
        scanned = self.figures.get("records_scanned", {})
        stored = self.figures.get("bytes", {})
        lines = []
        if tokens.get("reads"):
            lines.append(
                f"tokens returned per model-facing read: median {tokens['median']:,}, p95 {tokens['p95']:,}, "
                f"max {tokens['max']:,} ({tokens['reads']} reads)"
            )
        if scanned.get("reads"):
            lines.append(
                f"records scanned per query: median {scanned['median']:,}, max {scanned['max']:,}, "
                f"total {scanned['total']:,} ({scanned['reads']} queries)"
            )
        if stored:
            lines.append(
                f"bytes retained: {stored['logical_bytes']:,} logical in {stored['artifacts']} artifacts, "
                f"{stored['stored_bytes']:,} stored (deduplicated; {stored['derived_bytes']:,} of it derivatives), "
                f"{stored['store_on_disk_bytes']:,} on disk (the whole store)"
            )
        context = self.figures.get("working_set")
        if context:
            plain, kept = context["without"], context["with"]
            lines.append(
                f"long run ({context['calls']} tool calls of {context['result_bytes']['min']:,}-"
                f"{context['result_bytes']['max']:,} bytes, a {context['model_context_tokens']:,}-token model): "
                f"peak request {plain['peak_request_tokens']:,} tokens without the working set, "
                f"{kept['peak_request_tokens']:,} with it (budget {kept['budget_tokens']:,}); total "
                f"{plain['total_request_tokens']:,} against {kept['total_request_tokens']:,}; requests over the "
                f"model's context {plain['requests_over_context']} against {kept['requests_over_context']}; "
                f"{kept['reloads']} reloads ({kept['reloads_lossless']} byte-exact), "
                f"{kept['thrash_events']} thrash events"
            )
        miscopy = self.figures.get("miscopy", {})
        if miscopy.get("corrupted"):
            lines.append(
                f"mis-copied ids: {miscopy['corrupted']:,} ids with 1-2 characters changed, dropped, doubled or "
                f"swapped: {miscopy['detected_share']:.1%} detected as mis-copied, {miscopy['suggested_share']:.1%} "
                f"given the original as the suggestion ({miscopy['wrong_suggestions']} wrong suggestions); "
                f"{miscopy['controls_called_miscopied']} of {miscopy['controls']:,} unknown ids called mis-copied"
            )
        return [Text(line) for line in lines]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"
