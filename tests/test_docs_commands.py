"""Every `camus-xdp ...` command the README and docs/ show (in code blocks and inline code)
names a command that exists and only options that command takes: a guide moved or a flag
renamed cannot leave a reader a command that fails with "no such option"."""
from __future__ import annotations

import re
import shlex

import click
import pytest

from camus.cli import COMMAND_MODULES, main
from tests.conftest import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
INLINE = re.compile(r"`([^`\n]*camus-xdp [^`\n]*)`")
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def _commands(text: str) -> list[str]:
    """The `camus-xdp ...` command lines of a Markdown text (a fenced line's continuations joined)."""
    found = [m.group(1) for m in INLINE.finditer(text)]
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            found.append(line)
    out = []
    for line in found:
        at = line.find("camus-xdp ")
        if at >= 0:
            out.append(line[at:].split(" #")[0].split("&&")[0].split("|")[0].split(";")[0].strip().rstrip("&").strip())
    return out


def _resolve(words: list[str]) -> tuple[click.Command, list[str], str]:
    ctx = click.Context(main)
    cmd: click.Command = main
    name = "camus-xdp"
    rest = words
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(ctx, rest[0])
        if sub is None:
            break
        cmd, name, rest = sub, f"{name} {rest[0]}", rest[1:]
    return cmd, rest, name


CASES = [(doc.name, line) for doc in DOCS for line in _commands(doc.read_text())
         if line.split()[1:2] and line.split()[1] in COMMAND_MODULES]


def test_the_docs_show_commands() -> None:
    assert len(CASES) > 60


@pytest.mark.parametrize("doc, line", CASES)
def test_each_command_and_option_exists(doc: str, line: str) -> None:
    try:
        words = shlex.split(line)[1:]
    except ValueError:
        words = line.split()[1:]
    cmd, rest, name = _resolve(words)
    assert not isinstance(cmd, click.Group) or not rest or rest[0].startswith("-"), f"{doc}: {line}: no such command"
    takes = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
    for w in rest:
        if w.startswith("-") and w != "-" and not re.fullmatch(r"-\d.*", w):
            flag = w.split("=", 1)[0]
            assert flag in takes, f"{doc}: `{line}`: {name} has no option {flag}"
