"""Topics on the switch: the v1model parser loop that splits a topic into the tables' variables
(compiler/backends/p4/topics.py), its states walked in Python against the topic semantics, and
the program, the entries and the refusals around it."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.backends.emit import BackendError
from camus.compiler.backends.p4.entries import check_entries, check_program_fit, p4_tables
from camus.compiler.backends.p4.program import program_text
from camus.compiler.backends.p4.runtime import p4info_message
from camus.compiler.backends.p4.schema import P4Options, p4_schema
from camus.compiler.backends.p4.topics import parser_walk
from camus.compiler.compile import compile_files
from camus.compiler.language.spec_parser import load_spec, parse_spec
from camus.compiler.language.topics import derived_values
from tests.compiler.test_golden import check_golden
from tests.compiler.test_p4_program import check_entries_fit_program
from tests.conftest import APPS

TOPICS_SPEC = APPS / "topics" / "topics.p4"
NATS_SPEC = """
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
                 bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header msg_t { bit<128> subject; bit<32> value; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; msg_t msg; }
@pragma udp_port(4222)
@pragma query_field(msg.subject)
@pragma query_type(msg.subject, subject)
@pragma topic_levels(msg.subject, 3)
@pragma query_field(msg.value)
"""

LEVEL = st.sampled_from(["a", "b", "ab", "", "$x", "plant", "x" * 9, "y" * 20, "+"])


def _field(text: str, nbytes: int) -> bytes:
    return text.encode()[:nbytes].ljust(nbytes, b"\0")


@settings(max_examples=300, deadline=None)
@given(levels=st.lists(LEVEL, min_size=1, max_size=9), sep=st.sampled_from(["/", "."]),
       fill=st.booleans())
def test_the_parser_loop_leaves_the_variables_the_tables_test(levels, sep, fill) -> None:
    spec = load_spec(TOPICS_SPEC) if sep == "/" else parse_spec(NATS_SPEC)
    t = next(iter(spec.topics.values()))
    raw = _field(sep.join(levels), t.nbytes)
    if fill:                      # a topic that fills the field: no NUL ends it
        raw = (sep.join(levels).encode() * t.nbytes)[:t.nbytes] or b"a" * t.nbytes
    assert parser_walk(t, raw) == derived_values(t, int.from_bytes(raw, "big"))


def test_the_v1model_program_splits_topics_and_matches_their_levels(update_goldens: bool) -> None:
    text = program_text(load_spec(TOPICS_SPEC))
    check_golden("topics_v1model.p4", text, update_goldens)
    c = compile_files(str(TOPICS_SPEC), str(APPS / "topics" / "rules.txt"))
    check_program_fit(c.pipeline, c.spec, "v1model")
    tables = p4_tables(c.pipeline, c.spec)
    check_entries_fit_program(text, p4info_message(c.spec), tables)     # names, keys, kinds, actions
    check_entries(tables, p4_schema(c.spec))
    assert "camus_note_topic_t camus_note_topic;" in text
    assert "state camus_classify" in text and "transition camus_note_topic_begin;" in text
    assert "meta.camus_note_topic.l5 : exact" in text and "meta.camus_note_topic.depth : range" in text
    # a message longer than the header (its payload) is carried with it through recirculation
    assert "packet.extract(hdr.camus_skip, (bit<32>)meta.camus.extra * 8);" in text


def test_tofino_refuses_topics_with_the_reason() -> None:
    with pytest.raises(BackendError, match="Tofino's parser"):
        program_text(load_spec(TOPICS_SPEC), P4Options(arch="tna"))


def test_topic_entries_run_on_the_switch_interpreter_as_the_filters_say() -> None:
    from camus.compiler.backends.registry import engine
    from camus.compiler.codec.packets import message_from_text
    c = compile_files(str(TOPICS_SPEC), str(APPS / "topics" / "rules.txt"))
    sw, ir = engine("p4", c), engine("ir", c)
    for text in ("topic=plant/7/temp value=1", "topic=$SYS/broker/load value=1", "topic=a/b/humidity value=81",
                 "topic=office value=1", "topic=plant/7/temp/raw value=1"):
        m = message_from_text(c.spec, text)
        assert sw.run(m, 0)[0].names() == ir.run(m, 0)[0].names(), text


@pytest.mark.parametrize("spec_path", [TOPICS_SPEC, APPS / "dns" / "dns.p4", APPS / "attrs" / "pairs.p4"],
                         ids=lambda p: p.stem)
def test_the_control_block_names_the_parsed_variables_through_its_parameter(spec_path) -> None:
    """Camus mode: the block's keys reach topic, DNS name and attribute variables as members of
    its `camus` parameter, declared in camus_meta_t (the user's parser fills them)."""
    from camus.compiler.backends.p4.control import control_text
    text = control_text(load_spec(spec_path))
    keys = re.findall(r"^\s+([\w.\[\]:]+) : (?:exact|range|lpm) @name", text, re.M)
    assert keys and all(k.startswith(("camus.", "hdr.", "standard_metadata.")) for k in keys), keys
    struct = text[text.index("struct camus_meta_t {"):]
    struct = struct[:struct.index("}")]
    for k in keys:
        if k.startswith("camus.") and k.count(".") == 2:
            assert f" {k.split('.')[1]};" in struct, k           # the member is declared


def test_dns_names_get_the_whole_program_on_v1model_and_the_control_block_on_tofino() -> None:
    from camus.compiler.backends.base import TargetOptions
    from camus.compiler.backends.p4 import P4Backend
    c = compile_files(str(APPS / "dns" / "dns.p4"), str(APPS / "dns" / "rules.txt"))
    art = P4Backend().build(c, TargetOptions())
    assert "camus.p4" in art.files and "camus_control.p4" in art.files
    assert "t_dns_qname_0" in art.files["entries.cli"] and "answer_dns" in art.files["entries.cli"]
    art = P4Backend().build(c, TargetOptions(arch="tna"))
    assert "camus.p4" not in art.files and "camus_control.p4" in art.files
    assert "Tofino's parser cannot" in art.summary
