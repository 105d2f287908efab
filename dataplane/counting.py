"""What the rules of an attachment are, by their text: the lines the live tables come from (and
the key that says whether an update would change them), the counted rules and their totals."""
from __future__ import annotations

import hashlib

from camus.compiler.backends.ebpf.contents import MapContents
from camus.compiler.compile import CompileOptions, Compiled
from camus.compiler.language.rules_ast import Rule
from camus.compiler.language.rules_parser import strip_comment

from .installed import Installed, load_installed
from .maps import MapSet


def counted_rules(c: Compiled, contents: MapContents) -> tuple[list[str], dict[str, list[int]]]:
    """The text of each counted rule (CompileOptions.count_rules) and which leaves count it."""
    return rule_texts(c, c.options.count_rules), {str(s): list(r) for s, r in contents.leaf_rules.items()}


def rule_totals(maps: MapSet, inst: "Installed") -> dict[int, int]:
    """Messages each counted rule matched in the live tables (by rule index)."""
    totals = {i: 0 for i in range(len(inst.counted))}
    hits = maps.leaf_hits([int(s) for s in inst.leaf_rules])
    for s, rules in inst.leaf_rules.items():
        for i in rules:
            totals[i] += hits[int(s)]
    return totals


def rule_counts(iface: str) -> list[tuple[str, int]]:
    """(rule, messages it matched) for every counted rule, counts kept across updates of
    unchanged rules."""
    inst = load_installed(iface)
    maps = MapSet.from_pins(inst.pins)
    try:
        totals = rule_totals(maps, inst)
    finally:
        maps.close()
    return [(text, totals[i] + inst.rule_base.get(text, 0)) for i, text in enumerate(inst.counted)]


def rule_texts(c: Compiled, limit: int | None = None) -> list[str]:
    """Each rule (the first `limit`) as its source says it, on one line: from where it starts to
    where the next one does, comments stripped, its lines joined, its ';' dropped. A rule written
    over several lines is all of its lines (its first alone named the same rule whatever the rest
    said: an update that changed a later line reported "unchanged" and wrote nothing)."""
    return texts_of(c.source.text, c.rules, limit)


def texts_of(text: str, rules: list[Rule], limit: int | None = None) -> list[str]:
    """rule_texts of `rules` as parsed from `text` (offsets into it, in file order)."""
    n = len(rules) if limit is None else min(limit, len(rules))
    out = []
    for i in range(n):
        end = rules[i + 1].offset if i + 1 < len(rules) else len(text)
        span = text[rules[i].offset:end]
        if "\n" in span.rstrip("\n"):
            span = " ".join(t for t in map(strip_comment, span.splitlines()) if t)
        else:
            span = strip_comment(span)
        out.append(span.rstrip("; \t"))
    return out


def tables_key(options: object, lines: list[str], counted: list[str] | tuple[str, ...] = ()) -> str:
    """The live tables are a function of the rules (`lines`, rule_lines_of(c): comments and blank
    lines do not count), the options and the spec, which attach fixes, and, with per-rule
    counters, of which rules are counted (the first `count_rules` in file order: a reordered
    file counts others): the compiler is deterministic (golden files), so an update with the
    same key would write the very entries the live bank holds."""
    text = "\n".join(lines) + "\0" + repr(options) + "\0" + "\n".join(counted)
    return hashlib.sha256(text.encode()).hexdigest()


def rule_lines_of(c: Compiled) -> list[str]:
    return sorted(set(rule_texts(c)) - {""}) if c.source.text else []


def parsed_key(text: str, rules: list[Rule], options: CompileOptions) -> str:
    """The tables key of `rules`, parsed from `text`, compiled with `options`: the parse alone
    says whether the live tables already hold a rules file."""
    texts = texts_of(text, rules) if text else []
    return tables_key(options, sorted(set(texts) - {""}), texts[:options.count_rules])


def compiled_key(c: Compiled) -> str:
    """The tables key of compiled rules (the same function of their parse)."""
    return parsed_key(c.source.text, c.rules, c.options)


def leaf_ports(contents: MapContents) -> list[tuple[int, ...]]:
    return [ports for ports, *_ in contents.leaf.values()]
