"""The fenced code blocks of README.md and docs/*.md, and the directives that say how each one runs.

Invariants:

* A block is run when its info string's first word is ``python`` or ``sh``. The other spellings of those two
  (``py``, ``bash``, ``shell``, ``console``, ...) are errors, so no code block goes unrun by accident; every
  other tag (``json``, ``toml``, ``text``, none) is not code to run.
* A directive is one HTML comment on the line right above the fence: ``<!-- run: WORD ... -->``, its words
  from ``DIRECTIVES`` (plus ``reason="..."`` after ``skip``). An unknown or misplaced word is an error, never
  ignored; so is a ``run:`` comment anywhere but right above a ``python``/``sh`` fence.
* A block with ``continue`` joins the chain of the previous run block of the same language in the same file
  (same namespace and working directory); any other block starts a chain. Skipped and erroneous blocks are
  in no chain.
* The prose within ``PROSE_LINES`` of a ``scripted-model`` block names `` `model` `` (saying what it is in
  real use); the harness binds ``model`` to a scripted model of the framework the block imports.
* Errors are kept on the block (``Block.error``) or the file (``problems``) so each is reported by a test
  that names where it is; parsing itself never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = [
    "DIRECTIVES",
    "FRAMEWORKS",
    "ROOT",
    "Block",
    "Parsed",
    "doc_files",
    "parse_markdown",
    "parse_paths",
]

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("python", "sh")
DIRECTIVES = ("continue", "server", "scripted-model", "skip")
FRAMEWORKS = ("langchain", "openai_agents", "pydantic_ai", "adk")
PROSE_LINES = 8  # how far around a scripted-model block the prose must say what `model` is in real use
SAY_WHAT_MODEL_IS = (
    "run: scripted-model, but the prose around the block does not say what `model` is in real use "
    "(mention `model` within 8 lines, e.g. `model` is ChatOpenAI(model=...))"
)
# Info strings that name python or sh under another spelling: refused (write ```python or ```sh).
OTHER_SPELLINGS = {
    **dict.fromkeys(("py", "python3", "pycon", "ipython", "py3"), "python"),
    **dict.fromkeys(("bash", "shell", "console", "zsh", "shell-session", "sh-session", "shellsession"), "sh"),
}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*run\s*:(?P<body>.*?)-->\s*$")
_DIRECTIVE_LIKE = re.compile(r"<!--\s*run\b")
_TOKEN = re.compile(r'\s*(?P<word>[^\s=]+)(?:=(?P<value>"[^"]*"|\S*))?')
# A framework's own import, else refvault's adapter for it: which scripted model a block gets.
_FRAMEWORK_IMPORTS = {
    "langchain": r"langchain\w*",
    "openai_agents": r"agents",
    "pydantic_ai": r"pydantic_ai",
    "adk": r"google\.adk",
}
_ADAPTER_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+refvault\.integrations(?:\.(?P<dotted>\w+)|\s+import\s+(?P<names>[\w\s,()]+))", re.M
)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is (the fence's line, 1-based), its language, code and directive."""

    path: Path
    line: int
    language: str
    code: str
    words: frozenset[str] = frozenset()
    reason: str | None = None
    error: str | None = None
    chain: int = -1  # blocks of one file with the same chain run in turn, sharing state; -1: not run
    framework: str | None = None  # for scripted-model blocks: which framework's scripted model to bind

    @property
    def where(self) -> str:
        """``README.md:64``: the file (relative to the repository when inside it) and the fence's line."""
        try:
            name = self.path.relative_to(ROOT).as_posix()
        except ValueError:
            name = self.path.name
        return f"{name}:{self.line}"

    @property
    def first_code_line(self) -> int:
        return self.line + 1

    @property
    def skipped(self) -> bool:
        return "skip" in self.words

    @property
    def server(self) -> bool:
        return "server" in self.words

    @property
    def runs(self) -> bool:
        """Whether the block is run (no error, not skipped)."""
        return self.error is None and not self.skipped


@dataclass(frozen=True)
class Parsed:
    """Every python/sh block of some files (skipped and erroneous ones included) and the files' own problems."""

    blocks: list[Block]
    problems: list[str]

    def chain_of(self, block: Block) -> list[Block]:
        """The whole chain ``block`` is in, in order (``[]`` for a block that is not run)."""
        if not block.runs:
            return []
        return [b for b in self.blocks if b.path == block.path and b.chain == block.chain and b.runs]


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md: the pages whose blocks must run."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def parse_paths(paths: list[Path]) -> Parsed:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in paths:
        parsed = parse_markdown(path.read_text(encoding="utf-8"), path)
        blocks += parsed.blocks
        problems += parsed.problems
    return Parsed(blocks, problems)


def parse_markdown(text: str, path: Path) -> Parsed:
    """The python/sh blocks of one markdown text, with their directives and chains."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    used_directives: set[int] = set()
    stray: list[int] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            if _DIRECTIVE_LIKE.match(lines[index].strip()):  # not a mention in prose or inline code
                stray.append(index)
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        info = opening["info"].split()
        language = info[0] if info else ""
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [_dedent(line, indent) for line in lines[index + 1 : end]]
        directive = _DIRECTIVE.match(lines[index - 1]) if index > 0 else None
        runnable = language in RUN_LANGUAGES or language.lower() in (*RUN_LANGUAGES, *OTHER_SPELLINGS)
        if directive is not None:
            used_directives.add(index - 1)
            if not runnable:
                problems.append(
                    f"{_where(path, index)}: a run directive above a ```{language} block, which is never run"
                )
        if runnable:
            block = Block(path, index + 1, language, "\n".join(body) + "\n")
            block = _with_directive(block, directive["body"] if directive else None)
            if end >= len(lines):
                block = replace(block, error=block.error or "the fence is never closed")
            around = lines[max(0, index - PROSE_LINES) : index] + lines[end + 1 : end + 1 + PROSE_LINES]
            if "scripted-model" in block.words and not any("`model`" in line for line in around):
                block = replace(block, error=block.error or SAY_WHAT_MODEL_IS)
            blocks.append(block)
        index = end + 1
    for number in stray:
        if number not in used_directives:
            problems.append(
                f"{_where(path, number + 1)}: a run directive must be on the line right above a ```python or ```sh "
                "fence (with nothing between them)"
            )
    problems.sort(key=lambda problem: int(problem.split(": ", 1)[0].rsplit(":", 1)[1]))
    return Parsed(_chained(blocks), problems)


def _where(path: Path, line: int) -> str:
    return Block(path, line, "", "").where


def _dedent(line: str, indent: int) -> str:
    """A content line without the fence's indentation (as much of it as the line has)."""
    stripped = len(line) - len(line.lstrip(" "))
    return line[min(indent, stripped) :]


def _with_directive(block: Block, body: str | None) -> Block:
    """``block`` with its language checked and its directive read (an error on the block if either is wrong)."""
    if block.language not in RUN_LANGUAGES:
        wanted = OTHER_SPELLINGS.get(block.language.lower(), block.language.lower())
        return replace(block, error=f"```{block.language} is not run: write ```{wanted} (only python and sh run)")
    if body is None:
        return block
    words: set[str] = set()
    reason: str | None = None
    position = 0
    rest = body.strip()
    while position < len(rest):
        token = _TOKEN.match(rest, position)
        if token is None:  # pragma: no cover (the token pattern matches any non-space text)
            break
        position = token.end()
        word, value = token["word"], token["value"]
        if word == "reason":
            if value is None or not value.startswith('"'):
                return replace(block, error='run directive: write reason="..." (in double quotes)')
            reason = value[1:-1].strip()
            continue
        if word not in DIRECTIVES or value is not None:
            return replace(
                block, error=f"unknown run directive {token.group().strip()!r} (known: {', '.join(DIRECTIVES)})"
            )
        if word in words:
            return replace(block, error=f"run directive {word!r} given twice")
        words.add(word)
    error = None
    if not words:
        error = "an empty run directive (known words: " + ", ".join(DIRECTIVES) + ")"
    elif reason is not None and "skip" not in words:
        error = 'run directive: reason="..." goes with skip'
    elif "skip" in words and len(words) > 1:
        error = "run directive: skip goes alone (with its reason)"
    elif "scripted-model" in words and block.language != "python":
        error = "run directive: scripted-model is for python blocks"
    return replace(block, words=frozenset(words), reason=reason if "skip" in words else None, error=error)


def _chained(blocks: list[Block]) -> list[Block]:
    """The blocks with their chains numbered, and each scripted-model block's framework found."""
    chained: list[Block] = []
    previous: dict[str, Block] = {}  # the last run block of each language
    serial = 0
    for block in blocks:
        if not block.runs:
            chained.append(block)
            continue
        if "continue" in block.words:
            before = previous.get(block.language)
            if before is None:
                chained.append(replace(block, error=f"run: continue, but no earlier {block.language} block runs here"))
                continue
            block = replace(block, chain=before.chain)
        else:
            serial += 1
            block = replace(block, chain=serial)
        if "scripted-model" in block.words:
            earlier = [b.code for b in chained if b.runs and b.chain == block.chain and b.language == block.language]
            framework, error = _framework([block.code, *reversed(earlier)])
            block = replace(block, framework=framework, error=error)
            if error:
                chained.append(block)
                continue
        previous[block.language] = block
        chained.append(block)
    return chained


def _framework(codes: list[str]) -> tuple[str | None, str | None]:
    """The one framework the first of ``codes`` that names any imports (its own imports, else refvault's adapter)."""
    for code in codes:
        found = {
            name
            for name, module in _FRAMEWORK_IMPORTS.items()
            if re.search(rf"^\s*(?:from|import)\s+{module}(?:[.\s,]|$)", code, re.M)
        }
        if not found:
            for match in _ADAPTER_IMPORT.finditer(code):
                named = {match["dotted"]} if match["dotted"] else set(re.findall(r"\w+", match["names"] or ""))
                found |= named & set(FRAMEWORKS)
        if len(found) == 1:
            return found.pop(), None
        if found:
            return None, f"run: scripted-model, but the block imports several frameworks: {', '.join(sorted(found))}"
    return None, "run: scripted-model, but the block imports none of " + ", ".join(FRAMEWORKS)
