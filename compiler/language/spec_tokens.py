"""The spec reader's tokens: P4 source cut into identifiers, numbers, strings, punctuation and
pragmas (whitespace and comments dropped, positions kept), `#include`d files read in place.

A quoted include must exist next to the spec, except the control block the Camus compiler
generates for the very program being read (`#include "camus.p4"` then `Camus.apply(...)`): the
P4 back end writes that file, so it is collected instead of read. `<core.p4>`-style includes of
the P4 system headers are skipped when no such file is next to the spec.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import CompileError, Position, read_source

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+) | (?P<nl>\n) | (?P<comment>//[^\n]*|/\*.*?\*/) | (?P<directive>\#[^\n]*)
  | (?P<pragma>@pragma\b[^\n]*)
  | (?P<at>@[A-Za-z_]\w*)
  | (?P<num>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:w\d+)?)
  | (?P<str>"[^"\n]*")
  | (?P<id>[A-Za-z_][\w.]*)
  | (?P<punct>[{}()<>\[\];,=:*])
  | (?P<op>[-+/%&|!~^?.'\\])      # P4 expressions in declarations the reader skips
  | (?P<bad>.)
""", re.VERBOSE | re.DOTALL)

@dataclass
class Tok:
    kind: str
    text: str
    pos: Position


_INCLUDE = re.compile(r'#\s*include\s*(?:"([^"\n]+)"|<([^>\n]+)>)')


_CAMUS_APPLY = re.compile(r"\bCamus\s*\.\s*apply\s*\(")


def generated_include(name: str, text: str) -> bool:
    """Whether a quoted include is the control block the Camus compiler generates for this very
    program (`#include "camus.p4"`, then `Camus.apply(hdr, standard_metadata)`): a file we write,
    not one to read."""
    return "camus" in Path(name).name.lower() and _CAMUS_APPLY.search(text) is not None


def _include(directive: str, pos: Position, base: Path | None, chain: tuple[Path, ...], text: str,
             generated: list[str] | None = None) -> list[Tok]:
    """The tokens of an `#include`d file next to the spec (its own positions in its errors).
    A quoted file must exist, unless `generated` collects it (the Camus control this program
    applies, which the P4 back end writes); `<core.p4>`-style includes of the P4 system headers
    are skipped when no such file is next to the spec (their declarations are the compiler's)."""
    m = _INCLUDE.match(directive)
    if m is None:
        return []
    name, system = m.group(1), m.group(2)
    target = (base / (name or system)).resolve() if base is not None else None
    if target is None or not target.is_file():
        if system:
            return []
        if generated is not None and generated_include(name, text):
            generated.append(name)
            return []
        where = f"next to {chain[-1].name}" if chain else "(the spec is not read from a file)"
        raise CompileError(f'#include "{name}": no such file {where}', pos,
                           "put the included file in the spec's folder, or paste its declarations into the spec")
    if target in chain:
        cycle = " -> ".join(p.name for p in (*chain[chain.index(target):], target))
        raise CompileError(f"#include cycle: {cycle}", pos, "remove one of the #include lines")
    return tokenize(read_source(target, "spec"), str(target), target.parent, (*chain, target))


def tokenize(text: str, source: str, base: Path | None = None, chain: tuple[Path, ...] = (),
              generated: list[str] | None = None) -> list[Tok]:
    toks: list[Tok] = []
    line, line_start = 1, 0
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "bad"
        pos = Position(source, line, m.start() - line_start + 1)
        if kind == "directive":
            toks.extend(_include(m.group(), pos, base, chain, text, generated))
        elif kind in ("nl", "comment", "ws"):
            pass
        elif kind == "bad":
            raise CompileError(f"unexpected character {m.group()!r}", pos)
        else:
            toks.append(Tok(kind, m.group(), pos))
        nl = m.group().count("\n")
        if nl:
            line += nl
            line_start = m.start() + m.group().rindex("\n") + 1
    return toks


