"""Rule actions as atoms, the form every later stage works with.

`fwd(1, 2)` -> {("fwd", 1), ("fwd", 2)}, `drop` -> {("drop",)}, a custom action
`("call", name, (arg text, ...))`. Custom actions are the data plane's own (answerDNS,
notfoundDNS, ila) or declared by the spec (`@pragma query_action(name, ...)`); any other name is
an error, so a misspelt `forward(1)` is not taken for a custom action (on XDP that would hand
the packets to the host stack). Shared by the rules (lowering) and by the spec's
`query_default_action`, which takes the same action syntax.
"""
from __future__ import annotations

import ipaddress
from typing import Any

from .errors import CompileError, CompileErrors, Position
from .rules_ast import Action
from .rules_parser import SourceText, parse_rules

Atom = tuple[Any, ...]
ANSWER_DNS = "answerDNS"      # custom actions an XDP host runs itself: the DNS answer (bpf/camus_dns.h)
ILA = "ila"                   # and the identifier-locator rewrite (bpf/camus_ila.h)
BUILT_IN = frozenset({"fwd", "drop", ANSWER_DNS, "notfoundDNS", ILA})


def _unknown(a: Action, declared: frozenset[str], src: SourceText) -> CompileError:
    import difflib
    known = sorted(BUILT_IN | declared, key=str.lower)
    close = difflib.get_close_matches(a.name.lower(), [k.lower() for k in known], 1, 0.5)
    guess = next((k for k in known if close and k.lower() == close[0]), None)
    hint = (f"did you mean {guess}? " if guess else "") + (
        f"actions: {', '.join(known)}; a spec declares its own custom actions with "
        f"@pragma query_action({a.name})")
    return src.error(f"unknown action {a.name!r}", a.offset, hint)


def action_atoms(actions: tuple[Action, ...], src: SourceText,
                 declared: frozenset[str] | None = frozenset()) -> frozenset[Atom]:
    """The atoms of one rule's actions; `declared`: the spec's custom actions (None: any name)."""
    out: set[Atom] = set()
    for a in actions:
        if a.name == "fwd":
            if not a.args:
                raise src.error("fwd needs at least one port", a.offset, "fwd(1) or fwd(1, 2)")
            for arg in a.args:
                if arg.kind == "int" and arg.prefix_len is None and isinstance(arg.value, int):
                    if arg.value > 0xFFFF:
                        raise src.error(f"port {arg.value} is out of range", arg.offset, "0..65535")
                    out.add(("fwd", arg.value))
                elif arg.kind == "word":
                    out.add(("fwd", str(arg.value)))
                else:
                    raise src.error(f"bad port {arg.text}", arg.offset, "a port number or name")
        elif a.name == "drop":
            if a.args:
                raise src.error("drop takes no arguments", a.offset)
            out.add(("drop",))
        else:
            if declared is not None and a.name not in BUILT_IN and a.name not in declared:
                raise _unknown(a, declared, src)
            if a.name == ANSWER_DNS:
                _check_answer(a, src)
            elif a.name == ILA:
                _check_locator(a, src)
            out.add(("call", a.name, tuple(c.text for c in a.args)))
    return frozenset(out)


def _check_answer(a: Action, src: SourceText) -> None:
    """answerDNS(a.b.c.d): the data plane answers with this IPv4 address (an A record)."""
    if len(a.args) != 1:
        raise src.error("answerDNS takes one IPv4 address", a.offset, "answerDNS(10.0.0.105)")
    try:
        ipaddress.IPv4Address(a.args[0].text)
    except ValueError:
        raise src.error(f"answerDNS needs an IPv4 address, not {a.args[0].text}", a.args[0].offset,
                        "answerDNS(10.0.0.105)") from None


def _check_locator(a: Action, src: SourceText) -> None:
    """ila(L::): L is the locator, the top 64 bits of the new IPv6 destination (the identifier,
    the low 64 bits, stays), written as an IPv6 prefix of length 64 or less."""
    hint = "ila(2001:db8:a:1::)"
    if len(a.args) != 1:
        raise src.error("ila takes one locator", a.offset, hint)
    arg = a.args[0]
    try:
        value = int(ipaddress.IPv6Address(arg.text.partition("/")[0]))
    except ValueError:
        raise src.error(f"ila needs a locator written as an IPv6 prefix, not {arg.text}", arg.offset, hint) from None
    if arg.prefix_len not in (None, 64) or value & ((1 << 64) - 1):
        raise src.error(f"the locator {arg.text} is not the top 64 bits (the identifier's half, the low 64 bits, "
                        "stays as it is)", arg.offset, hint)


def default_action_atoms(text: str, pos: Position,
                         declared: frozenset[str] | None = frozenset()) -> frozenset[Atom]:
    """The atoms of a `query_default_action(...)` pragma; errors point at the pragma."""
    if not text.strip():
        raise CompileError("query_default_action needs an action", pos, "(notfoundDNS), (fwd(3)) or (drop)")
    src = SourceText(f"true : {text}", "<query_default_action>")
    try:
        rules, _ = parse_rules(src.text, src.name)
        if len(rules) != 1:
            raise CompileError("one action list expected", pos)
        return action_atoms(rules[0].actions, src, declared)
    except CompileErrors as exc:
        first = exc.errors[0] if exc.errors else None
        why = first.message if first is not None else "bad action"
        raise CompileError(f"query_default_action: {why} in {text!r}", pos,
                           "an action such as notfoundDNS, fwd(3) or drop") from None
    except CompileError as exc:
        raise CompileError(f"query_default_action: {exc.message} in {text!r}", pos,
                           "an action such as notfoundDNS, fwd(3) or drop") from None
