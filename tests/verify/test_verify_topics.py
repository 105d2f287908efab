"""Topics, subjects and DNS names in `verify`: the checker's reading of a filter agrees with the
direct semantics (topics.matches) on real topics, the shipped topic apps are proven on every
target, and a wrong topic entry is reported with a topic a person can send."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.compiler.backends.p4.entries import p4_tables
from camus.compiler.backends.p4.schema import p4_schema
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language import topics
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.verify.check import check, evaluate
from camus.verify.machines import p4_machine
from camus.verify.rules import read_rules
from camus.verify.targets import compiled_machine
from camus.verify.topic_rules import real_level, topic_text
from camus.cli_verify import message_values
from tests.conftest import APPS

SPEC = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
                bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header note_t { bit<256> name; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; note_t note; }
@pragma query_field(note.name)
@pragma query_type(note.name, KIND)
@pragma topic_levels(note.name, 4)
"""
CASES = {
    "topic": (["#", "+", "a/#", "a/+", "+/b", "a/b", "a/+/c", "$SYS/#", "+/+/#", "a//b", "a/b/c/d/#"],
              ["a", "b", "a/b", "a/c", "a/b/c", "b/b", "$SYS", "$SYS/x", "$x/b", "a//b", "a/b/c/d", "a/b/c/d/e", ""]),
    "subject": (["a", ">", "a.>", "a.*", "*.b", "a.*.c", "*.*.>"],
                ["a", "b", "a.b", "a.c", "a.b.c", "b.b", "a.b.c.d", "x.y.z.w.v"]),
    "dnsname": (["*", "com", "example.com", "*.example.com", "www.example.com", "*.com"],
                ["com", "example.com", "www.example.com", "a.b.example.com", "Example.COM", "net", "example.net", ""]),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_filter_read_by_the_checker_selects_what_the_flavor_says(kind: str) -> None:
    spec = parse_spec(SPEC.replace("KIND", kind))
    t = next(iter(spec.topics.values()))
    filters, names = CASES[kind]
    text = "".join(f'name == "{f}" : fwd({i + 1})\n' for i, f in enumerate(filters))
    rules = read_rules(spec, text)
    paths = [q.path for q in rules.fields]
    for name in names:
        raw = topics.encode(t, name)
        values = topics.derived_values(t, raw)
        row = [values.get(p, 0) for p in paths]
        assert evaluate(rules.domain, row), name               # every real message is in the domain
        for f, formula in zip(filters, rules.formulas):
            assert evaluate(formula, row) == topics.matches(t.flavor, f, name), (f, name)


@pytest.mark.parametrize("target", ["ir", "ebpf", "p4"])
def test_the_topic_apps_are_proven_on_every_target(target: str) -> None:
    apps = ["topics"] if target == "ebpf" else ["topics", "dns"]   # XDP answers DNS itself: its leaf's
    for app in apps:                                                 # answer is not read back (yet)
        spec = load_spec(APPS / app / f"{app}.p4")
        text = (APPS / app / "rules.txt").read_text()
        c = compile_rules(spec, text, options=CompileOptions(strategy="switch" if target == "p4" else "bdd"))
        got = check(read_rules(spec, text), compiled_machine(c, target), cover=c.pipeline.cover is not None)
        assert got.verdict == ("covers" if c.pipeline.cover is not None else "equal"), (app, got.to_json())


def test_a_wrong_topic_entry_is_shown_with_a_topic_a_person_can_send(tmp_path: Path) -> None:
    spec_path = APPS / "topics" / "topics.p4"
    spec = load_spec(spec_path)
    text = 'topic == "plant/+/temp" : fwd(1)\ntopic == "plant/7/#" : fwd(2)\ntopic == "office/+" : fwd(3)\n'
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    tables = p4_tables(c.pipeline, spec)
    entry = next(e for e in tables.entries if any(m.kind == "exact" and "/" in m.field and m.value
                                                  for m in e.matches))
    i = tables.entries.index(entry)
    import dataclasses
    bad_match = next(m for m in entry.matches if m.kind == "exact" and "/" in m.field and m.value)
    changed = dataclasses.replace(bad_match, value=topics.level_value(spec.topics["note.topic"], b"plan"))
    tables.entries[i] = dataclasses.replace(entry, matches=tuple(changed if m is bad_match else m
                                                                 for m in entry.matches))
    got = check(read_rules(spec, text), p4_machine(spec, tables, p4_schema(spec)))
    assert got.verdict == "differs" and got.counterexample is not None
    cx = got.counterexample
    t = spec.topics["note.topic"]
    name = topic_text(t, cx.values)
    assert name is not None and all(real_level(t, cx.values[f"note.topic/{k}"]) for k in range(t.levels))
    # the rules on that topic, straight from the flavor's semantics, give what the checker says
    want = {p for p, f in ((1, "plant/+/temp"), (2, "plant/7/#"), (3, "office/+")) if topics.matches("mqtt", f, name)}
    assert want == set(cx.rules.ports) != set(cx.tables.ports), (name, cx.to_json())
    assert set(PipelineInterpreter(c.pipeline).run(topics.derived_values(t, topics.encode(t, name))).actions.ports) == want
    # what the command prints for `explain --message`: the topic as text, which explain takes
    message = " ".join(f"{k}={v}" for k, v in message_values(spec, cx.values).items())
    assert f"note.topic={name}" in message
    (tmp_path / "rules.txt").write_text(text)
    r = CliRunner().invoke(main, ["explain", str(spec_path), str(tmp_path / "rules.txt"), "--message", message])
    assert r.exit_code == 0, r.output
    for p in want:
        assert f"fwd({p})" in r.output or str(p) in r.output, r.output


def test_the_command_proves_topic_rules_on_every_target(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text('topic == "plant/+/temp" : fwd(1)\ntopic == "plant/7/#" : fwd(2)\n')
    spec = APPS / "topics" / "topics.p4"
    for target in ("ir", "ebpf", "p4"):
        r = CliRunner().invoke(main, ["verify", str(spec), str(rules), "--target", target])
        assert r.exit_code == 0 and "equal to the rules" in r.output, r.output


def test_xdp_dns_answers_are_read_from_the_leaves() -> None:
    """On XDP a leaf answers a DNS query itself (its value: the address) and hands the rest of
    the custom actions to the host stack (a flag); the spec's default (`resolve`) applies where
    no rule delivers, state 0 included (leaf[] is an array: never written reads as zeros). A leaf
    whose address is changed is reported with the name it answers."""
    from camus.dataplane.maps import Leaf
    from camus.verify.targets import written_xdp
    spec = load_spec(APPS / "dns" / "dns.p4")
    text = (APPS / "dns" / "rules.txt").read_text()
    c = compile_rules(spec, text, options=CompileOptions(strategy="bdd"))
    maps, machine = written_xdp(c)
    assert check(read_rules(spec, text), machine()).verdict == "equal"
    key, raw = next((k, v) for k, v in maps.store["leaf"].items() if Leaf.from_buffer_copy(v).flags & 32)
    leaf = Leaf.from_buffer_copy(raw)
    leaf.value ^= 1 << 24                                    # the address's last byte
    maps.store["leaf"][key] = bytes(leaf)
    got = check(read_rules(spec, text), machine())
    assert got.verdict == "differs" and got.counterexample is not None
    cx = got.counterexample
    answers = {a for n, a in cx.rules.calls if n == "answerDNS"} ^ {a for n, a in cx.tables.calls if n == "answerDNS"}
    assert len(answers) == 2, cx.to_json()
    name = topic_text(spec.topics["dns.qname"], cx.values)
    assert name and PipelineInterpreter(c.pipeline).run(
        topics.derived_values(spec.topics["dns.qname"], topics.encode(spec.topics["dns.qname"], name))).actions.calls
