"""The block runner itself: the parser reads directives strictly, and the runner reports what fails and where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, SAY_WHAT_MODEL_IS, Block, Parsed, parse_markdown
from tests.docs.run import Outcome, run_chain

FENCE = "```"


def md(text: str) -> str:
    """Markdown written with ''' for fences (so this file's strings stay readable)."""
    return textwrap.dedent(text).replace("'''", FENCE)


def parsed(text: str) -> Parsed:
    return parse_markdown(md(text), Path("/nowhere/page.md"))


def run(text: str, tmp_path: Path, server_env: dict[str, str] | None = None) -> list[Outcome]:
    """Run every block of ``text`` (all one chain) and return their outcomes."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "page.md"
    page.write_text(md(text), encoding="utf-8")
    blocks = parse_markdown(page.read_text(encoding="utf-8"), page).blocks
    assert [b.error for b in blocks] == [None] * len(blocks)
    assert len({(b.language, b.chain) for b in blocks}) == 1, "the text must be one chain"
    return run_chain(blocks, tmp_path / "work", tmp_path / "harness", server_env or {})


# -- the parser ------------------------------------------------------------------------------------------------------


def test_parser_finds_python_and_sh_blocks_with_lines_directives_and_chains() -> None:
    page = parsed(
        """\
        # Title
        '''python
        x = 1
        '''
        <!-- run: continue server -->
        '''python
        print(x)
        '''
        '''json
        {"not": "run"}
        '''
        '''
        untagged, not run
        '''
        <!-- run: skip reason="starts a server in the foreground" -->
        '''sh
        refvault serve
        '''
        - in a list:
          '''sh
          echo indented
          '''
        """
    )
    assert page.problems == []
    assert [(b.where, b.language) for b in page.blocks] == [
        ("page.md:2", "python"),
        ("page.md:6", "python"),
        ("page.md:16", "sh"),
        ("page.md:20", "sh"),
    ]
    first, second, skipped, indented = page.blocks
    assert first.code == "x = 1\n"
    assert indented.code == "echo indented\n"
    assert second.words == {"continue", "server"}
    assert second.server
    assert first.chain == second.chain
    assert skipped.skipped
    assert skipped.reason == "starts a server in the foreground"
    assert not skipped.runs
    assert indented.runs
    assert indented.chain != first.chain
    assert page.chain_of(second) == [first, second]


@pytest.mark.parametrize(
    ("directive", "error"),
    [
        ("contineu", "unknown run directive 'contineu'"),
        ("continue sever", "unknown run directive 'sever'"),
        ("skip=yes", "unknown run directive 'skip=yes'"),
        ("skip reason=unquoted", 'reason="..."'),
        ('server reason="why"', "goes with skip"),
        ('skip server reason="why"', "skip goes alone"),
        ("server server", "given twice"),
        ("", "an empty run directive"),
    ],
)
def test_parser_refuses_unknown_or_misused_directive_words(directive: str, error: str) -> None:
    (block,) = parsed(f"<!-- run: {directive} -->\n'''python\npass\n'''\n").blocks
    assert block.error is not None
    assert error in block.error
    assert not block.runs


@pytest.mark.parametrize(("tag", "wanted"), [("py", "python"), ("bash", "sh"), ("shell", "sh"), ("console", "sh")])
def test_parser_refuses_other_spellings_of_python_and_sh(tag: str, wanted: str) -> None:
    (block,) = parsed(f"'''{tag}\necho hi\n'''\n").blocks
    assert block.error == f"```{tag} is not run: write ```{wanted} (only python and sh run)"


def test_parser_reports_a_directive_that_is_not_right_above_a_runnable_fence() -> None:
    page = parsed(
        """\
        <!-- run: skip reason="x" -->

        Mentioned in prose, `<!-- run: continue -->` is not a directive.
        '''python
        pass
        '''
        <!-- run: continue -->
        '''json
        {}
        '''
        """
    )
    assert len(page.problems) == 2
    assert page.problems[0].startswith("page.md:1: a run directive must be on the line right above")
    assert page.problems[1].startswith("page.md:7: a run directive above a ```json block")
    assert page.blocks[0].runs  # the misplaced skip did not apply


def test_parser_refuses_continue_with_nothing_to_continue_and_an_unclosed_fence() -> None:
    page = parsed("'''sh\necho\n'''\n<!-- run: continue -->\n'''python\npass\n'''\n'''python\nx = 1\n")
    sh, orphan, unclosed = page.blocks
    assert sh.runs
    assert orphan.error == "run: continue, but no earlier python block runs here"
    assert unclosed.error == "the fence is never closed"


@pytest.mark.parametrize(
    ("imports", "framework"),
    [
        ("from langchain_core.messages import HumanMessage", "langchain"),
        ("from agents import Agent, Runner", "openai_agents"),
        ("from pydantic_ai import Agent", "pydantic_ai"),
        ("from google.adk.agents import LlmAgent", "adk"),
        ("from refvault.integrations import adk as rv_adk", "adk"),
    ],
)
def test_scripted_model_blocks_name_their_framework_by_their_imports(imports: str, framework: str) -> None:
    (block,) = parsed(
        f"In real use `model` is a chat model.\n<!-- run: scripted-model -->\n'''python\n{imports}\n'''\n"
    ).blocks
    assert (block.framework, block.error) == (framework, None)


def test_scripted_model_blocks_say_what_model_is_in_real_use() -> None:
    (silent,) = parsed("Some prose.\n<!-- run: scripted-model -->\n'''python\nimport agents\n'''\n").blocks
    assert silent.error == SAY_WHAT_MODEL_IS
    (after,) = parsed("<!-- run: scripted-model -->\n'''python\nimport agents\n'''\n\nHere `model` is ...\n").blocks
    assert after.error is None


def test_scripted_model_blocks_need_exactly_one_framework() -> None:
    none, two = parsed(
        "`model` is whatever model you use.\n<!-- run: scripted-model -->\n'''python\nimport json\n'''\n"
        "<!-- run: scripted-model -->\n'''python\nimport agents\nimport pydantic_ai\n'''\n"
    ).blocks
    assert none.error is not None
    assert "imports none of" in none.error
    assert two.error is not None
    assert "several frameworks: openai_agents, pydantic_ai" in two.error


# -- the runner ------------------------------------------------------------------------------------------------------


def test_runner_reports_a_failing_python_block_with_where_and_why(tmp_path: Path) -> None:
    exited, after = run("'''python\nraise SystemExit(3)\n'''\n<!-- run: continue -->\n'''python\npass\n'''\n", tmp_path)
    assert not exited.ok
    assert "the block exited with SystemExit(3)" in exited.detail
    assert not after.ok
    assert after.detail == "not run: an earlier block of its chain, page.md:1, failed"
    (raised,) = run("# Page\n\n'''python\nprint('before')\nraise ValueError('boom')\n'''\n", tmp_path / "2")
    assert not raised.ok
    assert 'page.md", line 5' in raised.detail
    assert "ValueError: boom" in raised.detail
    assert raised.detail.endswith("output:\nbefore")


def test_python_blocks_run_as_a_script_would_in_a_fresh_directory(tmp_path: Path) -> None:
    (outcome,) = run(
        f"""\
        '''python
        import asyncio, os, shutil, sys
        from pathlib import Path

        assert __name__ == "__main__"
        assert Path.cwd().name == "work" and sys.path[0] == os.getcwd() and {str(ROOT)!r} not in sys.path
        assert os.environ["REFVAULT_STORE"] == str(Path.cwd() / "store")
        assert shutil.which("refvault") == str(Path(sys.executable).with_name("refvault"))
        assert "REFVAULT_URL" not in os.environ

        async def main() -> int:
            return 7

        assert asyncio.run(main()) == 7
        '''
        """,
        tmp_path,
    )
    assert outcome.ok, outcome.detail


def test_continue_shares_namespace_and_directory_and_others_start_fresh(tmp_path: Path) -> None:
    shared = run(
        "'''python\nx = 1\nopen('made.txt', 'w').close()\n'''\n"
        "<!-- run: continue -->\n'''python\nimport os\nassert x == 1 and os.path.exists('made.txt')\n'''\n",
        tmp_path / "a",
    )
    assert [o.ok for o in shared] == [True, True], shared
    (fresh,) = run("'''python\nprint(x)\n'''\n", tmp_path / "b")
    assert not fresh.ok
    assert "NameError: name 'x' is not defined" in fresh.detail


def test_sh_blocks_stop_at_a_failing_command_or_pipe(tmp_path: Path) -> None:
    (failed,) = run("'''sh\nfalse\necho never\n'''\n", tmp_path / "a")
    assert not failed.ok
    assert "exited with status 1" in failed.detail
    assert "never" not in failed.detail
    (piped,) = run("'''sh\nfalse | cat\n'''\n", tmp_path / "b")
    assert not piped.ok
    (unknown,) = run("\n'''sh\nno-such-command-here\n'''\n", tmp_path / "c")
    assert "page.md: line 3: no-such-command-here: command not found" in unknown.detail


def test_sh_continue_shares_the_directory_and_finds_refvault_on_path(tmp_path: Path) -> None:
    outcomes = run(
        "'''sh\ntouch made.txt\ntest \"$REFVAULT_STORE\" = \"$PWD/store\"\n'''\n"
        "<!-- run: continue -->\n'''sh\ntest -f made.txt\nrefvault --help > /dev/null\n'''\n",
        tmp_path,
    )
    assert [o.ok for o in outcomes] == [True, True], outcomes


def test_server_env_is_set_only_for_server_blocks(tmp_path: Path) -> None:
    env = {"REFVAULT_URL": "http://127.0.0.1:9", "REFVAULT_API_KEY": "rvk_example"}
    outcomes = run(
        "<!-- run: server -->\n'''python\nimport os\nassert os.environ['REFVAULT_URL'] == 'http://127.0.0.1:9'\n'''\n"
        "<!-- run: continue -->\n'''python\nassert 'REFVAULT_API_KEY' not in os.environ\n'''\n",
        tmp_path / "py",
        env,
    )
    assert [o.ok for o in outcomes] == [True, True], outcomes
    outcomes = run(
        "<!-- run: server -->\n'''sh\ntest \"$REFVAULT_API_KEY\" = rvk_example\n'''\n"
        "<!-- run: continue -->\n'''sh\ntest -z \"${REFVAULT_URL:-}\"\n'''\n",
        tmp_path / "sh",
        env,
    )
    assert [o.ok for o in outcomes] == [True, True], outcomes


def test_a_scripted_model_that_can_call_none_of_the_snippets_tools_fails_its_block(tmp_path: Path) -> None:
    code = SNIPPET_HEAD.replace("@box.tool\ndef fetch_logs", "def fetch_logs") + DRIVERS["pydantic_ai"]
    (outcome,) = run(f"`model`: a model.\n<!-- run: scripted-model -->\n'''python\n{code}'''\n", tmp_path)
    assert not outcome.ok
    assert "offered the snippet's tools (count_errors) but could call none" in outcome.detail


def test_a_scripted_model_that_is_never_called_fails_its_block(tmp_path: Path) -> None:
    (outcome,) = run("`model`: a model.\n<!-- run: scripted-model -->\n'''python\nimport pydantic_ai\n'''\n", tmp_path)
    assert not outcome.ok
    assert "`model` was never called" in outcome.detail


SNIPPET_HEAD = """\
from refvault import Ref, Scope, Toolbox, Vault

vault, scope = Vault.open(), Scope("acme", "ana", "s1")
box = Toolbox(vault)
counted = []


@box.tool
def fetch_logs(service: str) -> str:
    \"\"\"Fetch a service's logs (big: the model gets a preview and an id).\"\"\"
    return "\\n".join(f"{service} line {i} ERROR" for i in range(4000))


@box.tool
def count_errors(logs: Ref) -> int:
    \"\"\"Count the ERROR lines of logs.\"\"\"
    counted.append(logs.text().count("ERROR"))
    return counted[-1]

"""

DRIVERS = {
    "langchain": """\
from refvault.integrations import langchain as rv_langchain

tools = rv_langchain.tools(box, scope=scope)
by_name = {tool.name: tool for tool in tools}
chat = model.bind_tools(tools)
from langchain_core.messages import HumanMessage

messages = [HumanMessage("How many errors did api log?")]
for _ in range(5):
    reply = chat.invoke(messages)
    messages.append(reply)
    if not reply.tool_calls:
        break
    messages += [by_name[call["name"]].invoke(call) for call in reply.tool_calls]
""",
    "openai_agents": """\
import asyncio
from agents import Agent, Runner
from refvault.integrations import openai_agents as rv_openai

agent = Agent(name="analyst", model=model, tools=rv_openai.tools(box, scope=scope))
asyncio.run(Runner.run(agent, "How many errors did api log?"))
""",
    "pydantic_ai": """\
from pydantic_ai import Agent
from refvault.integrations import pydantic_ai as rv_pydantic

agent = Agent(model, toolsets=[rv_pydantic.toolset(box, scope=scope)])
agent.run_sync("How many errors did api log?")
""",
    "adk": """\
import asyncio
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from refvault.integrations import adk as rv_adk


async def main() -> None:
    agent = LlmAgent(name="analyst", model=model, tools=rv_adk.tools(box))
    runner = Runner(agent=agent, app_name="acme", session_service=InMemorySessionService())
    await runner.session_service.create_session(app_name="acme", user_id="ana", session_id="s1")
    message = types.Content(role="user", parts=[types.Part(text="How many errors did api log?")])
    async for _ in runner.run_async(user_id="ana", session_id="s1", new_message=message):
        pass

asyncio.run(main())
""",
}


@pytest.mark.parametrize("framework", sorted(DRIVERS))
def test_scripted_model_calls_the_snippets_tools_passing_references_on(framework: str, tmp_path: Path) -> None:
    code = SNIPPET_HEAD + DRIVERS[framework] + "assert counted == [4000], counted\n"
    (outcome,) = run(
        f"In real use `model` is a hosted model.\n<!-- run: scripted-model -->\n'''python\n{code}'''\n", tmp_path
    )
    assert outcome.ok, outcome.detail


def test_block_where_is_relative_to_the_repository() -> None:
    assert Block(ROOT / "docs" / "cli.md", 12, "sh", "").where == "docs/cli.md:12"
