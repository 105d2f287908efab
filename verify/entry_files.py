"""The P4 entries a compile writes for loading by hand, read back as a switch would take them:
`entries.cli` (bmv2's simple_switch_CLI commands) and `entries.bfrt.py` (a bfrt_python script
for Tofino's bfshell). Each line or call is read by the tool's own syntax against the tables the
program declares (names, key order, match kinds, action parameters), so an entry the tool would
refuse, or put in another control, is a defect here too."""
from __future__ import annotations

import ast
from typing import Any

from camus.compiler.backends.p4.entries import MAX_PRIORITY, Match, P4Entry, P4Tables, schema_tables
from camus.compiler.backends.p4.schema import P4Options, P4Schema, TableDecl, action_params, p4_schema
from camus.compiler.language.spec import Spec

from .rules import TableDefect, Undecidable

CONTROLS = {"CamusIngress": "ingress", "CamusEgress": "egress"}


def _decls(schema: P4Schema) -> dict[str, tuple[str, TableDecl]]:
    return {**{t.name: ("CamusIngress", t) for t in schema.tables}, **{t.name: ("CamusEgress", t) for t in schema.egress}}


def _entry(table: TableDecl, action: str, matches: list[Match], params: list[int], cli_priority: int) -> P4Entry:
    if action not in table.actions:
        raise TableDefect(f"{table.name}: no action {action} (it takes {', '.join(table.actions)})")
    if len(params) != len(action_params(action)):
        raise TableDefect(f"{table.name}: {action} takes {len(action_params(action))} parameter(s), got {len(params)}")
    priority = MAX_PRIORITY - cli_priority if cli_priority else 0
    return P4Entry(table.name, tuple(matches), action, tuple(params), priority)


# -- simple_switch_CLI ----------------------------------------------------------------------

def _cli_key(key: Any, text: str) -> Match:
    if key.match == "range":
        lo, sep, hi = text.partition("->")
        if not sep:
            raise TableDefect(f"{key.name}: a range key needs lo->hi, got {text!r}")
        return Match(key.name, "range", int(lo, 0), int(hi, 0))
    if key.match == "lpm":
        value, sep, plen = text.partition("/")
        if not sep:
            raise TableDefect(f"{key.name}: an lpm key needs value/length, got {text!r}")
        return Match(key.name, "lpm", int(value, 0), int(plen))
    if key.match == "ternary":
        value, sep, mask = text.partition("&&&")
        return Match(key.name, "ternary", int(value, 0), int(mask, 0))
    return Match(key.name, "exact", int(text, 0))


def tables_from_cli(spec: Spec, text: str) -> P4Tables:
    """simple_switch_CLI commands (v1model): table_set_default, table_add T A keys => params
    [priority], mc_mgrp_create / mc_node_create / mc_node_associate."""
    schema = p4_schema(spec, P4Options(arch="v1model"))
    decls = _decls(schema)
    out = schema_tables(schema)
    nodes: dict[int, tuple[int, ...]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        try:
            cmd = words[0]
            if cmd in ("table_add", "table_set_default"):
                if words[1] not in decls:
                    raise TableDefect(f"no table {words[1]} in the program")
                table = decls[words[1]][1]
            if cmd == "table_set_default":
                params = [int(w, 0) for w in words[3:]]
                if table.name == "t_root":
                    out.root = params[0]
                elif words[2] != "NoAction":
                    out.defaults[table.name] = (words[2], tuple(params))
            elif cmd == "table_add":
                arrow = words.index("=>")
                keys = words[3:arrow]
                if len(keys) != len(table.keys):
                    raise TableDefect(f"{table.name} has {len(table.keys)} key(s), the line gives {len(keys)}")
                matches = [_cli_key(k, w) for k, w in zip(table.keys, keys)]
                rest = [int(w, 0) for w in words[arrow + 1:]]
                n_params = len(action_params(words[2]))
                ranged = any(m.kind != "exact" for m in matches)
                params, prio = (rest[:n_params], rest[n_params] if ranged and len(rest) > n_params else 0)
                if ranged and len(rest) != n_params + 1:
                    raise TableDefect(f"{table.name}: a range, lpm or ternary entry needs a priority after its parameters")
                out.entries.append(_entry(table, words[2], matches, params, prio))
            elif cmd == "mc_mgrp_create":
                out.groups.setdefault(int(words[1]), ())
            elif cmd == "mc_node_create":
                nodes[int(words[1])] = tuple(int(w) for w in words[2:])
            elif cmd == "mc_node_associate":
                gid, node = int(words[1]), int(words[2])
                if node not in nodes or gid not in out.groups:
                    raise TableDefect(f"node {node} or group {gid} not created before it is associated")
                out.groups[gid] = tuple(sorted(set(out.groups[gid]) | set(nodes[node])))
            elif cmd != "mirroring_add":
                raise Undecidable(f"command {cmd} is not read by the checker")
        except (ValueError, IndexError) as exc:
            raise TableDefect(f"entries.cli line {n}: {line.strip()!r}: {exc}") from None
        except TableDefect as exc:
            raise TableDefect(f"entries.cli line {n}: {exc}") from None
    return out


# -- bfrt_python ----------------------------------------------------------------------------

def _value(node: ast.expr) -> Any:
    return ast.literal_eval(node)


def tables_from_bfrt(spec: Spec, text: str) -> P4Tables:
    """A bfrt_python script (TNA): `x = bfrt.<program>.pipe.<Control>`, then x.T.add_with_A(...)
    and x.T.set_default_with_A(...) with keys by name (range: _start/_end, lpm: _p_length,
    ternary: _mask, MATCH_PRIORITY), bfrt.pre.node/mgid entries. A table called through a control
    that does not declare it is a defect (bfshell has no such table there)."""
    schema = p4_schema(spec, P4Options(arch="tna"))
    decls = _decls(schema)
    out = schema_tables(schema)
    controls: dict[str, str] = {}
    nodes: dict[int, tuple[int, ...]] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise TableDefect(f"entries.bfrt.py: {exc}") from None
    for st in tree.body:
        try:
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Attribute) and len(st.targets) == 1:
                target = st.targets[0]
                if isinstance(target, ast.Name):
                    controls[target.id] = st.value.attr
                continue
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
                raise Undecidable(f"a statement the checker does not read: {ast.unparse(st)[:80]}")
            call = st.value
            f = call.func
            while isinstance(f, ast.Attribute) and f.attr in ("push",):       # x.entry(...).push()
                inner = f.value
                if isinstance(inner, ast.Call):
                    call, f = inner, inner.func
                else:
                    break
            dotted = ast.unparse(f)
            kw = {k.arg: _value(k.value) for k in call.keywords if k.arg}
            if dotted in ("bfrt.complete_operations", "bfrt.mirror.cfg.entry_with_normal"):
                continue
            if dotted == "bfrt.pre.node.entry":
                nodes[int(kw["MULTICAST_NODE_ID"])] = tuple(int(p) for p in kw["DEV_PORT"])
                continue
            if dotted == "bfrt.pre.mgid.entry":
                ports: set[int] = set()
                for node in kw["MULTICAST_NODE_ID"]:
                    if node not in nodes:
                        raise TableDefect(f"multicast group {kw['MGID']} names node {node}, not created before")
                    ports |= set(nodes[node])
                out.groups[int(kw["MGID"])] = tuple(sorted(ports))
                continue
            var, _, rest = dotted.partition(".")
            table_name, _, method = rest.partition(".")
            control = controls.get(var)
            if control is None:
                raise Undecidable(f"{dotted}: {var} is not a control the script names")
            if table_name not in decls:
                raise TableDefect(f"{control}.{table_name}: the program has no such table")
            declared_in, table = decls[table_name]
            if declared_in != control:
                raise TableDefect(f"{control}.{table_name}: the program declares {table_name} in {declared_in}, "
                                  f"not {control}: bfshell has no {control}.{table_name}")
            if method.startswith("set_default_with_"):
                action = method[len("set_default_with_"):]
                params = [int(kw[p]) for p in action_params(action)]
                if table.name == "t_root":
                    out.root = params[0]
                else:
                    out.defaults[table.name] = (action, tuple(params))
            elif method.startswith("add_with_"):
                action = method[len("add_with_"):]
                matches = []
                for key in table.keys:
                    name = key.name.replace(".", "_")
                    if key.match == "range":
                        matches.append(Match(key.name, "range", int(kw[f"{name}_start"]), int(kw[f"{name}_end"])))
                    elif key.match == "lpm":
                        matches.append(Match(key.name, "lpm", int(kw[name]), int(kw[f"{name}_p_length"])))
                    elif key.match == "ternary":
                        matches.append(Match(key.name, "ternary", int(kw[name]), int(kw[f"{name}_mask"])))
                    else:
                        matches.append(Match(key.name, "exact", int(kw[name])))
                params = [int(kw[p]) for p in action_params(action)]
                out.entries.append(_entry(table, action, matches, params, int(kw.get("MATCH_PRIORITY", 0))))
            else:
                raise Undecidable(f"{dotted}: a call the checker does not read")
        except KeyError as exc:
            raise TableDefect(f"entries.bfrt.py line {st.lineno}: no argument {exc}") from None
        except (ValueError, TypeError) as exc:
            raise TableDefect(f"entries.bfrt.py line {st.lineno}: {exc}") from None
        except TableDefect as exc:
            raise TableDefect(f"entries.bfrt.py line {st.lineno}: {exc}") from None
    return out
