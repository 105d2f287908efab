"""The edge broker's filter trie against the direct MQTT / NATS semantics, on random filters,
sessions and topics, with filters added and removed."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from camus.compiler.language.topics import matches
from camus.edge.trie import TopicTrie
from tests.compiler.test_topics import TOPICS, mqtt_filters

NATS_TOKEN = st.sampled_from(["a", "b", "$x", "*"])


@st.composite
def nats_filters(draw) -> str:
    tokens = draw(st.lists(NATS_TOKEN, min_size=1, max_size=4))
    if draw(st.booleans()):
        tokens.append(">")
    return ".".join(tokens)


@settings(max_examples=300, deadline=None)
@given(subs=st.lists(st.tuples(st.integers(1, 4), mqtt_filters()), min_size=1, max_size=12),
       gone=st.lists(st.integers(0, 11), max_size=4), topics=st.lists(TOPICS, min_size=1, max_size=8))
def test_trie_matches_the_mqtt_semantics(subs, gone, topics) -> None:
    trie = TopicTrie("mqtt")
    for sid, flt in subs:
        trie.add(flt, sid)
    for t in topics:           # remembered answers: the removals below must make it forget them
        assert trie.match(t) == {sid for sid, f in subs if matches("mqtt", f, t)}, (t, subs)
    removed = set(gone) & set(range(len(subs)))
    for g in removed:
        trie.remove(subs[g][1], subs[g][0])
    live = [x for k, x in enumerate(subs) if k not in removed]
    for t in topics:
        assert trie.match(t) == {sid for sid, f in live if matches("mqtt", f, t)}, (t, live)


@settings(max_examples=200, deadline=None)
@given(subs=st.lists(st.tuples(st.integers(1, 4), nats_filters()), min_size=1, max_size=10),
       topics=st.lists(st.lists(st.sampled_from(["a", "b", "$x"]), min_size=1, max_size=5).map(".".join),
                       min_size=1, max_size=8))
def test_trie_matches_the_nats_semantics(subs, topics) -> None:
    trie = TopicTrie("nats")
    for sid, flt in subs:
        trie.add(flt, sid)
    for t in topics:
        assert trie.match(t) == {sid for sid, f in subs if matches("nats", f, t)}, (t, subs)
