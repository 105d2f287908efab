"""Topic fields: MQTT 3.1.1 / NATS wildcard semantics, their lowering to plain variables, and
the label rewrite for wide fields, against the direct matcher on random filters and topics."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.codec.packets import build_packet, decode_packet, message_from_text
from camus.compiler.ir.labels import label_wide, labelled_values
from camus.compiler.language.errors import CompileErrors
from camus.compiler.language.spec_parser import parse_spec
from camus.compiler.language.topics import matches
from camus.compiler.semantics.filter_eval import FilterEvaluator
from camus.compiler.semantics.interpreter import PipelineInterpreter

SPEC = """
header note_t { bit<384> topic; bit<16> value; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; note_t note; }
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
                bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
@pragma udp_port(9200)
@pragma query_field(note.topic)
@pragma query_type(note.topic, {kind})
@pragma topic_levels(note.topic, 4)
@pragma query_field(note.value)
"""
MQTT = parse_spec(SPEC.replace("{kind}", "topic"), "mqtt.p4")
NATS = parse_spec(SPEC.replace("{kind}", "subject"), "nats.p4")

# MQTT 3.1.1 section 4.7 (non-normative examples) and the $-topic rule (4.7.2)
MQTT_CASES = [
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("#", "$SYS/broker", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("a//b", "a//b", True),
    ("a/+/b", "a//b", True),
    ("#", "/", True),
]
NATS_CASES = [("foo.*", "foo.bar", True), ("foo.*", "foo.bar.baz", False), ("foo.>", "foo.bar.baz", True),
              ("foo.>", "foo", False), (">", "foo", True), ("*.bar", "foo.bar", True), ("foo", "foo", True)]


@pytest.mark.parametrize("flt, topic, want", MQTT_CASES)
def test_mqtt_semantics(flt, topic, want) -> None:
    assert matches("mqtt", flt, topic) is want
    check_compiled(MQTT, [flt], [topic])


@pytest.mark.parametrize("flt, topic, want", NATS_CASES)
def test_nats_semantics(flt, topic, want) -> None:
    assert matches("nats", flt, topic) is want
    check_compiled(NATS, [flt], [topic])


def check_compiled(spec, filters: list[str], topics: list[str], values=(0, 9), strategy: str = "auto") -> None:
    """Every back end's view (filters, IR, labelled IR, packet decode) delivers what `matches` says."""
    rules = "\n".join(f'topic == "{f}" and value < {5 + i % 3} : fwd({i + 1})' if i % 4 == 3 else
                      f'topic == "{f}" : fwd({i + 1})' for i, f in enumerate(filters))
    c = compile_rules(spec, rules, options=CompileOptions(strategy=strategy))
    interp = PipelineInterpreter(c.pipeline)
    evaluator = FilterEvaluator(c.rules, c.lowered)
    widths = {q.path: q.width for q in spec.query_fields}
    labelled, labels = label_wide(c.pipeline, widths)
    linterp = PipelineInterpreter(labelled)
    flavor = "mqtt" if spec is MQTT else "nats"
    for t in topics:
        for v in values:
            msg = message_from_text(spec, f"topic={t} value={v}")
            want = tuple(i + 1 for i, f in enumerate(filters)
                         if matches(flavor, f, t) and (i % 4 != 3 or v < 5 + i % 3))
            assert tuple(interp.run(msg).actions.ports) == want, (t, v, rules)
            assert tuple(evaluator.run(msg).ports) == want, (t, v)
            assert tuple(linterp.run(labelled_values(msg, labels)).actions.ports) == want, (t, v)
            decoded = decode_packet(spec, build_packet(spec, [msg])).messages[0].values
            assert decoded == msg


LEVEL = st.sampled_from(["a", "b", "ab", "", "$x"])


@st.composite
def mqtt_filters(draw) -> str:
    levels = draw(st.lists(st.one_of(LEVEL, st.just("+")), min_size=1, max_size=5))
    if draw(st.booleans()):
        levels = levels[:4] + ["#"]
    named = [lv for lv in levels[4:] if lv not in ("+", "#")]
    if named:
        levels = levels[:4]
    return "/".join(levels) or "+"        # (an empty filter is not a filter)


TOPICS = st.lists(LEVEL, min_size=1, max_size=6).map("/".join).filter(bool)


@settings(max_examples=150, deadline=None)
@given(filters=st.lists(mqtt_filters(), min_size=1, max_size=8), topics=st.lists(TOPICS, min_size=1, max_size=8),
       strategy=st.sampled_from(["bdd", "bitvector"]))
def test_random_mqtt_filters_match_the_direct_semantics(filters, topics, strategy) -> None:
    check_compiled(MQTT, filters, topics, strategy=strategy)


@pytest.mark.parametrize("rule, message", [
    ('topic == "a/#/b" : fwd(1)', "'#' must be a whole level and the last"),
    ('topic == "a+" : fwd(1)', "'+' must be a whole level"),
    ('topic == "a/b/c/d/e" : fwd(1)', "names level 5, note.topic has 4"),
    ('topic > "a" : fwd(1)', "only == and !="),
    ('topic == 3 : fwd(1)', "quoted topic filter"),
])
def test_bad_filters_are_refused_at_their_position(rule, message) -> None:
    with pytest.raises(CompileErrors) as info:
        compile_rules(MQTT, "# ok\n" + rule)
    err = info.value.errors[0]
    assert message in str(err) and err.position is not None and err.position.line == 2


def test_deep_topics_and_not_equal() -> None:
    check_compiled(MQTT, ["a/+/+/+/#", "#", "a/b/a/b"], ["a/b/a/b/a/b", "a/b/a/b", "a", "a/b/a"])
    c = compile_rules(MQTT, 'topic != "a/#" : fwd(1)')
    interp = PipelineInterpreter(c.pipeline)
    for t, want in (("a/b", ()), ("b", (1,)), ("$x", (1,))):
        assert tuple(interp.run(message_from_text(MQTT, f"topic={t}")).actions.ports) == want


def test_comments_end_outside_quotes_only() -> None:
    from camus.compiler.language.rules_parser import strip_comment
    assert strip_comment('topic == "a/#" : fwd(1)  # plant') == 'topic == "a/#" : fwd(1)'
    assert strip_comment('topic == "#" : fwd(2)') == 'topic == "#" : fwd(2)'
    assert strip_comment("# only a comment") == ""
