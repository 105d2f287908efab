"""The P4 back end's static program: golden files per app and architecture, and the program's
tables checked against the entries written for it (names, keys, match kinds, actions, params).
No P4 compiler runs on this machine (p4c/bmv2 are not in Debian 12), so these are the checks."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.bench.workloads import itch_rules
from camus.cli import main
from camus.compiler.backends.base import TargetOptions
from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.registry import backend
from camus.compiler.backends.p4.budget import Budget, over_budget
from camus.compiler.backends.p4.entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4.formats import bfrt_python, simple_switch_cli
from camus.compiler.backends.p4.interp import EntryInterpreter
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import MATCH_NAMES, Names, p4info_message, tables_from_entities, updates
from camus.compiler.backends.p4.runtime import text as text_of
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.compile import CompileOptions, compile_files, compile_rules
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import message_from_text
from camus.compiler.language.spec_parser import load_spec, parse_spec
from tests.compiler.test_golden import check_golden
from tests.conftest import APPS

APP_FILES = {"itch": (APPS / "itch" / "itch.p4", APPS / "itch" / "rules.txt"),
             "int": (APPS / "int" / "int.p4", APPS / "int" / "rules.txt"),
             "siena": (APPS / "siena" / "siena.p4", APPS / "siena" / "rules.txt")}


@pytest.mark.parametrize("arch", ["v1model", "tna"])
@pytest.mark.parametrize("app", sorted(APP_FILES))
def test_program_matches_golden(app: str, arch: str, update_goldens: bool) -> None:
    text = program_text(load_spec(APP_FILES[app][0]), P4Options(arch=arch))
    assert text == program_text(load_spec(APP_FILES[app][0]), P4Options(arch=arch))     # deterministic
    check_golden(f"{app}_{arch}.p4", text, update_goldens)


@pytest.mark.parametrize("app", sorted(APP_FILES))
def test_entries_match_golden(app: str, update_goldens: bool) -> None:
    c = compile_files(*APP_FILES[app])
    t = p4_tables(c.pipeline, c.spec)
    names = Names(p4info_message(c.spec))
    text = (simple_switch_cli(t) + "\n# --- P4Runtime ---\n" + "".join(text_of(u) for u in updates(names, t)) +
            "\n# --- bfrt_python ---\n" + bfrt_python(t, f"camus_{app}"))
    check_golden(f"{app}_entries.txt", text, update_goldens)


# -- the program against its entries ------------------------------------------------------------

_TABLE = re.compile(r"^    table (\w+) \{\n(.*?)^    \}", re.M | re.S)


def declared_tables(program: str) -> dict[str, dict]:
    """Tables of a generated program: key (name, kind) in order, actions, as the text says."""
    out = {}
    for name, body in _TABLE.findall(program):
        keys = re.findall(r"(\S+) : (\w+)(?: @name\(\"([^\"]+)\"\))?;", body.split("actions")[0])
        actions = re.search(r"actions = \{([^}]*)\}", body).group(1)
        out[name] = {"key": [(n or expr, kind) for expr, kind, n in keys],
                     "actions": [a.strip() for a in actions.split(";") if a.strip()]}
    return out


def declared_actions(program: str) -> dict[str, int]:
    return {name: len([p for p in params.split(",") if p.strip()])
            for name, params in re.findall(r"action (\w+)\(([^)]*)\)", program)}


def check_entries_fit_program(program: str, info, tables) -> None:
    decl = declared_tables(program)
    actions = declared_actions(program)
    action_name = {a.preamble.id: a.preamble.alias for a in info.actions}
    for t in info.tables:                         # P4Info and the program say the same
        name = t.preamble.alias
        assert name in decl, name
        assert [(k.name, MATCH_NAMES[k.match_type]) for k in t.match_fields] == decl[name]["key"], name
        assert [action_name[r.id] for r in t.action_refs] == decl[name]["actions"], name
        for a in t.action_refs:
            assert len(next(x for x in info.actions if x.preamble.id == a.id).params) == actions.get(
                action_name[a.id], 0), (name, action_name[a.id])
    assert set(decl) == {t.preamble.alias for t in info.tables}
    for e in tables.entries:
        assert e.table in decl, e.table
        assert [(m.field, m.kind) for m in e.matches] == decl[e.table]["key"], e
        assert e.action in decl[e.table]["actions"], e
        assert len(e.params) == actions.get(e.action, 0), e      # NoAction: core.p4's
    assert set(tables.order) <= set(decl)


def test_program_declares_every_header_of_the_spec() -> None:
    for app, (spec_path, _) in APP_FILES.items():
        spec = load_spec(spec_path)
        text = program_text(spec)
        for inst in spec.instances.values():
            body = re.search(rf"header {inst.type.name} \{{\n(.*?)\n\}}", text, re.S).group(1)
            fields = re.findall(r"bit<(\d+)> (\w+);", body)
            assert [(int(w), n) for w, n in fields] == [(f.width, f.name) for f in inst.type.fields]
            assert f"{inst.type.name} {inst.name};" in text


@pytest.mark.parametrize("arch", ["v1model", "tna"])
@pytest.mark.parametrize("app", sorted(APP_FILES))
def test_shipped_entries_fit_the_program(app: str, arch: str) -> None:
    c = compile_files(*APP_FILES[app])
    opts = P4Options(arch=arch)
    if arch == "tna" and c.pipeline.state_vars:
        with pytest.raises(BackendError, match="Tofino"):
            check_program_fit(c.pipeline, c.spec, arch)
        return
    check_program_fit(c.pipeline, c.spec, arch)
    tables = p4_tables(c.pipeline, c.spec)
    check_entries_fit_program(program_text(c.spec, opts), p4info_message(c.spec, opts), tables)
    check_entries(tables, p4_schema(c.spec, opts))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), seed=st.integers(0, 10_000))
def test_random_itch_rule_sets_fit_one_program_and_agree_with_the_ir(n: int, seed: int) -> None:
    """One program for the spec, any rule set: entries always fit it, and run like the IR."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    c = compile_rules(spec, "\n".join(itch_rules(n, seed)))
    check_program_fit(c.pipeline, spec)
    tables = p4_tables(c.pipeline, spec)
    check_entries_fit_program(program_text(spec), p4info_message(spec), tables)
    check_entries(tables, p4_schema(spec))
    sw, ir = EntryInterpreter(tables), PipelineInterpreter(c.pipeline)
    names = Names(p4info_message(spec))
    loaded = EntryInterpreter(tables_from_entities(names, spec, [u.entity for u in updates(names, tables)]))
    import random
    rng = random.Random(seed)
    for _ in range(30):
        m = message_from_text(spec, f"stock={rng.choice(['GOOGL', 'AAPL', 'MSFT', 'IBM', 'NVDA', 'ZZZ'])} "
                                    f"price={rng.randint(0, 3_000_000)} shares={rng.randint(0, 5000)}")
        want = ir.run(m, 0).actions
        got = sw.run(m)
        assert (got.ports, got.drop) == (tuple(want.ports), want.drop and not want.ports)
        assert loaded.run(m).ports == got.ports          # what a switch loads from P4Runtime JSON


# -- what the program cannot hold is said before anything is written --------------------------

def test_program_fit_errors() -> None:
    spec = load_spec(APPS / "itch" / "itch.p4")
    rules = "stock == GOOGL and price > 5 : fwd(1)\nshares > 10 and price < 3 : fwd(2)\n"
    with pytest.raises(BackendError, match="--order spec"):
        check_program_fit(_reordered(spec, rules), spec)
    with pytest.raises(BackendError, match="--compress"):
        check_program_fit(compile_rules(spec, rules, options=CompileOptions(compress_max=16)).pipeline, spec)
    with pytest.raises(BackendError, match="power of two microseconds .is 1000000; use 524288 or 1048576"):
        check_program_fit(compile_rules(spec, "count(price) > 3 : fwd(1)").pipeline, spec)
    int_spec = load_spec(APPS / "int" / "int.p4")
    with pytest.raises(BackendError, match="division"):
        check_program_fit(compile_rules(int_spec, "avg(hop_latency) > 3 : fwd(1)").pipeline, int_spec)


def _reordered(spec, rules):
    c = compile_rules(spec, rules)
    c.pipeline.tables.reverse()
    return c.pipeline


def test_ipv6_feeds_on_v1model_and_missing_layers_are_refused() -> None:
    v6 = parse_spec("header ethernet_t { bit<48> d; bit<48> s; bit<16> t; }\n"
                    "header ipv6_t { bit<32> vtf; bit<16> len; bit<8> nh; bit<8> hl; bit<128> src; bit<128> dst; }\n"
                    "header udp_t { bit<16> sp; bit<16> dp; bit<16> len; bit<16> csum; }\n"
                    "header m_t { bit<32> x; }\n"
                    "struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; m_t m; }\n"
                    "@pragma query_field(m.x)\n")
    text = program_text(v6)                     # fields found by layout, whatever the spec calls them
    assert "0x86dd: parse_ipv6;" in text and "transition select(hdr.ipv6.nh)" in text
    assert "hdr.ipv6.hl = hdr.ipv6.hl - 1;" in text and "key = { hdr.ipv6.dst : lpm; }" in text
    assert "update_checksum" not in text        # IPv6 has no header checksum
    with pytest.raises(BackendError, match="Tofino program parses IPv4 feeds"):
        program_text(v6, P4Options(arch="tna"))
    bare = parse_spec("header m_t { bit<32> x; }\n@pragma query_field(m.x)\n")
    with pytest.raises(BackendError, match="missing: ethernet, ipv4, udp"):
        program_text(bare)


def test_budget_and_fit_alpha(tmp_path: Path) -> None:
    spec, rules = APPS / "itch" / "itch.p4", tmp_path / "rules.txt"
    rules.write_text("\n".join(itch_rules(300, 4)) + "\n")
    c = compile_rules(load_spec(spec), rules.read_text())
    report = json.loads(backend("p4").build(c, TargetOptions()).files["switch_resources.json"])
    # one TCAM less deep for the price table than its exact entries take (budgets hold against
    # whole memories, as a compile reserves them; the other tables' are fixed)
    price = report["tables"]["t_add_order_price"]
    tight = {"tcam_block_rows": report["tcam_alloc_block_rows"] - price["tcam_block_rows"] // price["tcam_rows"] * 512}
    assert over_budget(report, Budget(**tight)) and not over_budget(report, Budget())
    budget = tmp_path / "budget.yaml"
    budget.write_text(yaml.safe_dump(tight))
    out = tmp_path / "sw"
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "--budget", str(budget),
                                  "--exact", "-o", str(out)])
    assert r.exit_code == 1 and "tcam block rows" in r.output and "--exact refuses" in r.output
    assert not out.exists()                                  # over budget: nothing written
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "--budget", str(budget),
                                  "-o", str(out)])                 # fitting is the default
    assert r.exit_code == 0, r.output
    assert "fitted: numeric constants discretised to multiples of" in r.output
    fitted = json.loads((out / "switch_resources.json").read_text())
    assert fitted["tcam_alloc_block_rows"] <= tight["tcam_block_rows"]
    assert {"camus.p4", "entries.cli", "entries.txtpb", "entries.bfrt.py", "p4info.txtpb"} <= \
        {p.name for p in out.iterdir()}
    budget.write_text("tcam_rowz: 3\n")
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "--budget", str(budget)])
    assert r.exit_code == 1 and "unknown budget keys ['tcam_rowz']" in r.output


def test_cli_p4_target_writes_the_program_and_entries(tmp_path: Path) -> None:
    spec, rules = APP_FILES["itch"]
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "--arch", "tna", "--emit"])
    assert r.exit_code == 0 and r.output.startswith("// camus-xdp packet subscriptions for Tofino (TNA).")
    r = CliRunner().invoke(main, ["compile", str(spec), str(rules), "--target", "p4", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.output
    cli = (tmp_path / "entries.cli").read_text()
    assert "table_set_default t_root set_state" in cli and "mirroring_add 250" in cli
    # the program written is the spec's program with each table's size from its entries (what the
    # switch_resources.json report costs) and no egress port filter tables (this rule set has none)
    written = (tmp_path / "camus.p4").read_text()
    report = json.loads((tmp_path / "switch_resources.json").read_text())["tables"]
    sizes = tuple((name, r["size"]) for name, r in report.items() if name != "ipv4_lpm")
    assert written == program_text(load_spec(spec), P4Options(sizes=sizes, port_filters=False))
    assert "t_pf_port" not in written and f"size = {report['t_leaf']['size']};" in written


# -- the original Camus syntax ------------------------------------------------------------------

def test_original_camus_spec_compiles_to_the_same_tables() -> None:
    """The P4_14 header_type spec and the P4_16 one give the same layout and the same entries."""
    old, new = load_spec(APPS / "camus_compat" / "itch.p4"), load_spec(APPS / "itch" / "itch.p4")
    assert [(i.name, i.type.width, i.role) for i in old.instances.values()] == \
        [(i.name, i.type.width, i.role) for i in new.instances.values()]
    assert old.framing == new.framing and old.udp_ports == new.udp_ports and old.message_type == new.message_type
    rules = (APPS / "camus_compat" / "rules.txt").read_text()
    a, b = compile_rules(old, rules), compile_rules(new, rules)
    sa, sb = EntryInterpreter(p4_tables(a.pipeline, old)), EntryInterpreter(p4_tables(b.pipeline, new))
    for text in ["stock=GOOGL price=60", "stock=GOOGL price=10 shares=100", "stock=AAPL", "stock=MSFT shares=100",
                 "buy_sell_indicator=83 price=5", "stock=IBM"]:
        ma, mb = message_from_text(old, text), message_from_text(new, text)
        assert ma == mb
        assert sa.run(ma).ports == sb.run(mb).ports == tuple(PipelineInterpreter(a.pipeline).run(ma, 0).actions.ports)


def test_p4_14_spec_errors_have_positions() -> None:
    from camus.compiler.language.errors import CompileErrors
    with pytest.raises(CompileErrors, match=r"<spec>:2:\d+: error: field 'x' needs a fixed width"):
        parse_spec("header_type h_t {\n fields { x : *; }\n}\nheader h_t h;\n@pragma query_field(h.x)\n")


def test_switch_windows_count_like_the_ir() -> None:
    """count/sum windows in the switch's registers: same deliveries as the IR over time."""
    spec = load_spec(APPS / "int" / "int.p4")
    rules = ("count(hop_latency) > 3 and hop_latency > 100 : fwd(1)\n"
             "sum(queue_occupancy) >= 1000 and switch_id == 2 : fwd(2)\n"
             "count(queue_occupancy) < 2 : fwd(3)\n")
    c = compile_rules(spec, rules)
    check_program_fit(c.pipeline, spec)
    tables = p4_tables(c.pipeline, spec)
    check_entries_fit_program(program_text(spec), p4info_message(spec), tables)
    check_entries(tables, p4_schema(spec))
    sw, ir = EntryInterpreter(tables), PipelineInterpreter(c.pipeline)
    import random
    rng = random.Random(7)
    now = 0
    delivered = set()
    for _ in range(600):
        now += rng.choice([1, 10, 1000, 40_000])
        m = {"int_report.switch_id": rng.choice([1, 2]), "int_report.hop_latency": rng.choice([5, 500]),
             "int_report.queue_occupancy": rng.randint(0, 400), "int_report.flow_dst": 0,
             "int_report.ingress_port": 0, "int_report.egress_port": 0}
        want = ir.run(m, now).actions
        got = sw.run(m, now)
        assert got.ports == tuple(want.ports), now
        delivered.update(got.ports)
    assert delivered == {1, 2, 3}           # every window-dependent rule fired at some point


def test_tna_egress_prunes_by_precomputed_lengths_and_bfrt_sets_the_mirror_session() -> None:
    """No runtime multiplication or counting chain in Tofino's egress: the parser states set the
    count of later messages as constants and t_camus_prune holds each count's bytes to cut; the
    bfrt script configures the recirculation mirror session the ingress uses."""
    spec = load_spec(APPS / "itch" / "itch.p4")
    text = program_text(spec, P4Options(arch="tna"))
    egress = text[text.index("control CamusEgress("):text.index("control CamusEgressDeparser(")]
    assert not re.search(r"\w \* \w", egress) and "parsed + 1" not in egress
    per = spec.message_bytes + 2
    entries = {(int(n), int(r)): int(cut) for n, r, cut in
               re.findall(r"\((\d+), (\d+)\) : camus_prune\((\d+)\);", egress)}
    assert entries == {(rest + 1, rest): rest * per for rest in range(P4Options().tna_max_rest + 1)}
    assert [int(x) for x in re.findall(r"meta\.camus\.rest_parsed = (\d+);", text)].count(15) == 2  # both parsers
    c = compile_files(*APP_FILES["itch"])
    bfrt = bfrt_python(p4_tables(c.pipeline, c.spec))
    assert "bfrt.mirror.cfg.entry_with_normal(sid=250," in bfrt and "CAMUS_RECIRC_SESSION = 250" in text
