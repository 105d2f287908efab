"""camus-xdp verify: the decision procedure against mutated tables (every mutation that changes
behaviour is caught, with a counterexample the table interpreters confirm), the shipped apps,
covers, and the command's exit statuses."""
from __future__ import annotations

import ctypes
import dataclasses
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.bench.workloads import itch_rules
from camus.cli import main
from camus.compiler.backends.p4.entries import Match, p4_tables
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.verify.check import check
from camus.verify.machines import ir_machine, p4_machine
from camus.verify.rules import TableDefect, Undecidable, read_rules
from tests.conftest import APPS

ITCH = APPS / "itch" / "itch.p4"
SENSOR = """header reading_t { bit<16> site; bit<8> kind; bit<32> temperature; bit<16> battery; }
struct headers { reading_t reading; }
@pragma query_field(reading.site)
@pragma query_field(reading.kind)
@pragma query_field(reading.temperature)
@pragma query_field(reading.battery)
"""


def _sensor_rules(n: int, seed: int) -> str:
    rng = random.Random(seed)
    ranges = {"site": (0, 50), "kind": (0, 11), "temperature": (0, 2000), "battery": (0, 100)}
    out = []
    for _ in range(n):
        parts = []
        for a in rng.sample(list(ranges), rng.randint(1, 3)):
            op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
            parts.append(f"{a} {op} {rng.randint(*ranges[a])}")
        if len(parts) >= 2 and rng.random() < 0.2:
            parts[0:2] = [f"({parts[0]} or {parts[1]})"]
        out.append(" and ".join(parts) + f" : fwd({rng.randint(1, 12)})")
    return "\n".join(out) + "\n"


def _mutate(t, rng: random.Random):
    """One random single-entry mutation of P4 tables: a key bound, an action's next state or
    port, a group member, a deleted or an added entry."""
    t = dataclasses.replace(t, entries=list(t.entries), groups=dict(t.groups))
    kind = rng.choice(["bound", "next", "port", "group", "delete", "add"])
    field_entries = [i for i, e in enumerate(t.entries) if e.action == "set_state" and len(e.matches) > 1]
    leaf_entries = [i for i, e in enumerate(t.entries) if e.table == "t_leaf" and e.action in ("set_port", "set_mgid")]
    if kind == "bound" and field_entries:
        i = rng.choice(field_entries)
        e = t.entries[i]
        m = e.matches[1]
        if m.kind == "range":
            lo, hi = m.value, m.arg
            if rng.random() < 0.5 and lo > 0:
                lo -= rng.choice([1, 7])
            elif hi > lo:
                hi -= 1
            else:
                hi += 1
            new = Match(m.field, m.kind, max(0, lo), hi)
        else:
            new = Match(m.field, m.kind, m.value + 1, m.arg)
        t.entries[i] = dataclasses.replace(e, matches=(e.matches[0], new))
    elif kind == "next" and field_entries:
        i = rng.choice(field_entries)
        e = t.entries[i]
        others = sorted({x.params[0] for x in t.entries if x.action == "set_state"} - {e.params[0]})
        t.entries[i] = dataclasses.replace(e, params=(rng.choice(others) if others else e.params[0] + 1,))
    elif kind == "port" and leaf_entries:
        i = rng.choice(leaf_entries)
        e = t.entries[i]
        if e.action == "set_port":
            t.entries[i] = dataclasses.replace(e, params=(e.params[0] % 12 + 1,))
        else:
            t.entries[i] = dataclasses.replace(e, params=(rng.choice(sorted(t.groups)),))
    elif kind == "group" and t.groups:
        g = rng.choice(sorted(t.groups))
        ports = list(t.groups[g])
        ports.pop(rng.randrange(len(ports)))
        t.groups[g] = tuple(ports)
    elif kind == "delete":
        t.entries.pop(rng.randrange(len(t.entries)))
    else:
        e = t.entries[rng.choice(field_entries or range(len(t.entries)))]
        if len(e.matches) > 1 and e.matches[1].kind == "exact":
            t.entries.append(dataclasses.replace(e, matches=(e.matches[0], Match(e.matches[1].field, "exact",
                                                                                 e.matches[1].value ^ 1))))
        else:
            t.entries.append(dataclasses.replace(e, matches=(Match("meta.state", "exact", e.matches[0].value + 1),
                                                             *e.matches[1:])))
    return t, kind


@pytest.mark.parametrize("workload", ["itch", "sensor"])
def test_mutations_are_caught_with_real_counterexamples(workload: str) -> None:
    """100 random single-entry mutations per workload (200 in all): each one the checker says
    differs has a counterexample on which the mutated entries and the rules really disagree
    (the P4 entry interpreter and the reference interpreter say so); the others are proven
    equal, and the unmutated tables are too."""
    if workload == "itch":
        spec, text = load_spec(ITCH), "\n".join(itch_rules(400, 3)) + "\n"
    else:
        spec, text = parse_spec(SENSOR, "sensor.p4"), _sensor_rules(60, 5)
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    rules = read_rules(spec, text)
    schema = p4_schema(spec)
    base = p4_tables(c.pipeline, spec)
    assert check(rules, p4_machine(spec, base, schema)).verdict == "equal"
    assert check(rules, ir_machine(spec, c.pipeline)).verdict == "equal"
    reference = PipelineInterpreter(c.pipeline)
    rng = random.Random(11)
    points: dict[str, list[int]] = {q.path: [0, (1 << q.width) - 1] for q in spec.query_fields}
    for e in base.entries:                     # the entries' own bounds and their neighbours
        for m in e.matches[1:]:
            top = (1 << spec.query_field(m.field).width) - 1 if spec.query_field(m.field) else 0
            for v in (m.value - 1, m.value, m.arg, m.arg + 1) if m.kind == "range" else (m.value - 1, m.value, m.value + 1):
                if m.field in points and 0 <= v <= top:
                    points[m.field].append(v)
    caught = equal = undecided = 0
    for _ in range(100):
        mutated, kind = _mutate(base, rng)
        try:
            got = check(rules, p4_machine(spec, mutated, schema))
        except TableDefect:                 # an added range that ties another's priority: caught
            caught += 1
            continue
        except Undecidable:
            undecided += 1
            continue
        if got.verdict == "equal":              # a second opinion on the proof: samples agree too
            equal += 1
            for _ in range(50):
                values = {q.path: rng.choice(points[q.path]) for q in spec.query_fields}
                assert set(EntryInterpreter(mutated).run(values).ports) == set(reference.run(values).actions.ports)
            continue
        assert got.verdict == "differs", kind
        cx = got.counterexample
        assert cx is not None
        values = dict(cx.values)
        tables = EntryInterpreter(mutated).run(values)
        rules_give = reference.run(values).actions
        assert set(tables.ports) == set(cx.tables.ports) and bool(tables.drop) == cx.tables.drop, (kind, cx)
        assert set(rules_give.ports) == set(cx.rules.ports), (kind, cx)
        assert set(tables.ports) != set(rules_give.ports) or bool(tables.drop) != bool(rules_give.drop), (kind, cx)
        caught += 1
    assert caught >= 60 and undecided == 0 and caught + equal == 100, (caught, equal, undecided)
    print(f"{workload}: {caught} caught, {equal} proven equal, {undecided} undecidable")


def shipped_pairs() -> list[tuple[Path, Path]]:
    """Every shipped spec with its rules: `<spec>_rules.txt` beside it, else the folder's rules.txt."""
    out = []
    for folder in sorted(p for p in APPS.iterdir() if p.is_dir()):
        for spec in sorted(folder.glob("*.p4")):
            rules = next((r for r in (folder / f"{spec.stem}_rules.txt", folder / "rules.txt") if r.exists()), None)
            if rules is not None:
                out.append((spec, rules))
    return out


@pytest.mark.parametrize("target", ["ir", "ebpf", "p4"])
def test_every_shipped_app_verifies_on_every_target(target: str) -> None:
    """Every spec and rules file shipped (the apps, the public Camus pairs): proven equal (or a
    switch cover proven never to under-deliver), none left undecided."""
    from camus.verify.targets import compiled_machine
    decided = []
    for spec_path, rules_path in shipped_pairs():
        spec = load_spec(spec_path)
        text = rules_path.read_text()
        c = compile_rules(spec, text, options=CompileOptions(strategy="switch" if target == "p4" else "bdd"))
        got = check(read_rules(spec, text), compiled_machine(c, target), cover=c.pipeline.cover is not None)
        assert got.verdict == ("covers" if c.pipeline.cover is not None else "equal"), (spec_path, got.to_json())
        decided.append(f"{spec_path.parent.name}/{spec_path.stem}")
    assert len(decided) >= 16, decided          # 12 app folders, the compat folder holds 4 pairs, attrs 2
    print(f"{target}: {', '.join(decided)} verified")


def test_ebpf_maps_as_written_are_checked_byte_for_byte() -> None:
    """--target ebpf reads the values MapSet.write encodes: one leaf's port word changed in them
    is a difference, and the counterexample's message really reaches that leaf."""
    from camus.compiler.backends.ebpf.program import RADIX_LEVELS
    from camus.compiler.backends.ebpf.tables import sized_contents
    from camus.dataplane.maps import Leaf
    from camus.verify.xdp_maps import live_machine, written_maps
    spec = load_spec(ITCH)
    text = "\n".join(itch_rules(300, 3)) + "\n"
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    limits, contents = sized_contents(c.pipeline, spec)
    maps = written_maps(contents)
    def machine():
        return live_machine(spec, maps, contents.root, list(contents.ports), limits.range_levels, RADIX_LEVELS)
    assert check(read_rules(spec, text), machine()).verdict == "equal"
    state = next(s for s, (words, *_) in sorted(contents.leaf.items()) if words[0])
    key = bytes(ctypes.c_uint32(state))
    leaf = Leaf.from_buffer_copy(maps.store["leaf"][key])
    leaf.ports[0] ^= 1                        # port bit 0 given or taken away
    maps.store["leaf"][key] = bytes(leaf)
    got = check(read_rules(spec, text), machine())
    assert got.verdict == "differs" and got.counterexample is not None
    last = got.counterexample.path[-1]                      # "final state N: ..." (N may carry the final flag)
    assert int(last.split()[2].rstrip(":")) & 0x3FFFFFFF == state, got.counterexample.path
    want = PipelineInterpreter(c.pipeline).run(dict(got.counterexample.values)).actions
    assert set(want.ports) == set(got.counterexample.rules.ports) != set(got.counterexample.tables.ports)


def test_a_cover_is_proven_never_to_under_deliver() -> None:
    spec, text = parse_spec(SENSOR, "sensor.p4"), _sensor_rules(60, 9)
    c = compile_rules(spec, text, options=CompileOptions(strategy="cover", cover_width=4, cover_fanout=4))
    assert c.pipeline.cover is not None
    got = check(read_rules(spec, text), ir_machine(spec, c.pipeline), cover=True)
    assert got.verdict == "covers" and got.max_ports > 0
    assert check(read_rules(spec, text), ir_machine(spec, c.pipeline)).verdict == "differs"
    # a port taken out of one of the cover's groups: some rule's messages lose it, and the
    # counterexample shows one (the P4 entries as mutated deliver less than that rule wants)
    t = p4_tables(c.pipeline, spec)
    g = max(t.groups, key=lambda k: len(t.groups[k]))
    t = dataclasses.replace(t, groups={**t.groups, g: t.groups[g][1:]})
    bad = check(read_rules(spec, text), p4_machine(spec, t, p4_schema(spec)), cover=True)
    assert bad.verdict == "differs" and bad.counterexample is not None
    cx = bad.counterexample
    assert not cx.rules.ports <= set(EntryInterpreter(t).run(dict(cx.values)).ports)


def test_the_command(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text("\n".join(itch_rules(200, 2)) + "\n")
    r = CliRunner().invoke(main, ["verify", str(ITCH), str(rules)])
    assert r.exit_code == 0 and "equal to the rules, for every message" in r.output, r.output
    out = tmp_path / "sw"
    assert CliRunner().invoke(main, ["compile", str(ITCH), str(rules), "--target", "p4", "-o", str(out)]).exit_code == 0
    r = CliRunner().invoke(main, ["verify", str(ITCH), str(rules), "--target", "p4", "--dir", str(out), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["verdict"] == "equal", r.output
    # a tampered entries file: the first price entry's next state changed
    text = (out / "entries.txtpb").read_text()
    (out / "entries.txtpb").write_text(text.replace('value: "\\001"', 'value: "\\002"', 1))
    r = CliRunner().invoke(main, ["verify", str(ITCH), str(rules), "--target", "p4", "--dir", str(out)])
    assert r.exit_code == 1 and "DIFFERS" in r.output and "explain" in r.output, r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["verify", str(ITCH), str(rules), "--target", "p4", "--dir", str(tmp_path / "empty"),
                                  "--json"])                 # nothing written there: cannot decide, and why
    assert r.exit_code == 2 and json.loads(r.output)["verdict"] == "undecidable", r.output


WIDE_SPEC = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv6_t { bit<4> version; bit<8> traffic_class; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src; bit<128> dst; }
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; }
@pragma query_field(ipv6.dst)
@pragma query_field(udp.dst_port)
"""


@pytest.mark.parametrize("target", ["ir", "ebpf", "p4"])
def test_fields_wider_than_64_bits_are_decided(target: str) -> None:
    """IPv6 destinations (two 64-bit words in the message spec): exact names, prefixes on either
    side of the word boundary and a range across it verify on every target; a P4 entry of the
    low word changed is caught, and the counterexample's whole address shows it."""
    from camus.verify.targets import compiled_machine
    spec = parse_spec(WIDE_SPEC, "wide.p4")
    rng = random.Random(5)
    lines = [f"ipv6.dst == b001:{rng.randrange(1 << 16):x}::{rng.randrange(1 << 16):x} : fwd({1 + k % 7})"
             for k in range(60)]
    lines += ["ipv6.dst == 2001:db8::/32 and udp.dst_port == 53 : fwd(8)",
              "ipv6.dst == 2001:db8:0:0:8000::/66 : fwd(9)",
              "ipv6.dst > 2001:db8::ffff:ffff:ffff:fff0 and ipv6.dst < 2001:db8:0:2:: : fwd(10)",
              "not ipv6.dst == b001::/16 : drop"]
    text = "\n".join(lines) + "\n"
    c = compile_rules(spec, text, options=CompileOptions(strategy="switch" if target == "p4" else "bdd"))
    got = check(read_rules(spec, text), compiled_machine(c, target))
    assert got.verdict == "equal", got.to_json()
    if target != "p4":
        return
    t = p4_tables(c.pipeline, spec)
    k = next(i for i, e in enumerate(t.entries) if e.table == "t_ipv6_dst_lo_exact")
    e = t.entries[k]
    moved = dataclasses.replace(e, matches=e.matches[:-1] + (dataclasses.replace(e.matches[-1], value=e.matches[-1].value ^ 1),))
    bad = dataclasses.replace(t, entries=t.entries[:k] + [moved] + t.entries[k + 1:])
    got = check(read_rules(spec, text), p4_machine(spec, bad, p4_schema(spec)))
    assert got.verdict == "differs" and got.counterexample is not None
    values = dict(got.counterexample.values)
    assert set(EntryInterpreter(bad).run(values).ports) == set(got.counterexample.tables.ports)
    assert set(PipelineInterpreter(c.pipeline).run(values).actions.ports) == set(got.counterexample.rules.ports)
    from camus.cli_verify import whole_values
    whole = whole_values(values)
    assert whole["ipv6.dst"] >> 64 == values["ipv6.dst/hi"] and whole["ipv6.dst"] & (1 << 64) - 1 == values["ipv6.dst/lo"]


def test_rule_counters_are_checked_against_the_rules_that_hold() -> None:
    """count_rules: each leaf names the counted rules a message reaching it satisfies; the check
    proves that for every message, and a counter added to one leaf is a counterexample."""
    spec = load_spec(ITCH)
    text = "\n".join(itch_rules(300, 3) + ["stock == GOOGL : drop", "price > 900000 : fwd(3)"]) + "\n"
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd", count_rules=64))
    rules = read_rules(spec, text).with_counters({i: [i] for i in range(64)})
    m = ir_machine(spec, c.pipeline)
    assert check(rules, m).verdict == "equal"
    s = next(s for s, o in sorted(m.outcomes.items()) if o.counted)
    o = m.outcomes[s]
    m.outcomes[s] = dataclasses.replace(o, counted=o.counted ^ {63})
    got = check(rules, m)
    assert got.verdict == "differs" and got.counterexample is not None
    cx = got.counterexample
    assert cx.rules.ports == cx.tables.ports and cx.rules.counted ^ cx.tables.counted == {63}


def test_every_written_form_of_the_entries_is_read_as_its_tool_takes_it(tmp_path: Path) -> None:
    """--dir reads entries.txtpb, entries.cli and entries.bfrt.py each on its own. A changed CLI
    line and a changed bfrt call are each a counterexample of their own form; a TNA cover's
    egress port filters are CamusEgress tables in the bfrt script (the writer once put them under
    CamusIngress, where bfshell has no such table: the reader refuses that)."""
    from camus.bench import workloads as w
    rules = tmp_path / "rules.txt"
    rules.write_text("\n".join(itch_rules(200, 2)) + "\n")
    out = tmp_path / "sw"
    assert CliRunner().invoke(main, ["compile", str(ITCH), str(rules), "--target", "p4", "-o", str(out)]).exit_code == 0

    def verify(spec: Path, rule_file: Path, *extra: str) -> tuple[int, str]:
        r = CliRunner().invoke(main, ["verify", str(spec), str(rule_file), "--target", "p4", "--dir", str(out), *extra])
        return r.exit_code, r.output
    code, said = verify(ITCH, rules)
    assert code == 0 and all(f"p4 ({form}): equal" in said for form in ("P4Runtime", "simple_switch_CLI", "bfrt_python"))
    for name, old, new in (("entries.cli", " => 1\n", " => 2\n"), ("entries.bfrt.py", ", next=1)", ", next=2)")):
        saved = (out / name).read_text()
        (out / name).write_text(saved.replace(old, new, 1))
        code, said = verify(ITCH, rules, "--json")
        form = "simple_switch_CLI" if name == "entries.cli" else "bfrt_python"
        got = json.loads(said)
        assert code == 1 and got["verdict"] == "differs" and got["tables"] == f"p4 ({form})", said
        (out / name).write_text(saved)
    # a TNA cover with egress port filters
    spec, sensor = tmp_path / "sensor.p4", tmp_path / "sensor.txt"
    spec.write_text(w.SENSOR_SPEC)
    sensor.write_text("\n".join(w.sensor_rules(150, 1, n_hosts=24)) + "\n")
    out = tmp_path / "tna"
    done = CliRunner().invoke(main, ["compile", str(spec), str(sensor), "--target", "p4", "--arch", "tna", "-o", str(out)])
    assert done.exit_code == 0, done.output
    bfrt = (out / "entries.bfrt.py").read_text()
    assert "eg.t_pf_port.add_with" in bfrt and "ig.t_pf_" not in bfrt
    code, said = verify(spec, sensor, "--cover")
    assert code == 0 and "p4 (bfrt_python): covers" in said, said
    (out / "entries.bfrt.py").write_text(bfrt.replace("eg.t_pf_port.add_with", "ig.t_pf_port.add_with", 1))
    code, said = verify(spec, sensor, "--cover")
    assert code == 1 and "declares t_pf_port in CamusEgress, not CamusIngress" in said, said
