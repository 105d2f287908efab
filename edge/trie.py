"""Which sessions' filters match a topic: a trie over filter levels (MQTT `+`/`#`, NATS `*`/`>`),
one walk per publication instead of one test per filter (compiler/language/topics.matches is
the semantics; tests compare the two). Answers are remembered per topic until the filters change:
publications repeat their topics (a few hot ones carry most), and a dict lookup is a fraction of
a walk."""
from __future__ import annotations

from dataclasses import dataclass, field

KNOWN_TOPICS = 1 << 16          # topics whose matches are remembered (all forgotten when full)


@dataclass
class _Node:
    children: dict[str, "_Node"] = field(default_factory=dict)
    here: dict[int, int] = field(default_factory=dict)        # session -> filters ending here
    rest: dict[int, int] = field(default_factory=dict)        # session -> filters ending in '#' / '>' here


class TopicTrie:
    def __init__(self, flavor: str) -> None:
        self.flavor = flavor
        self.sep = "/" if flavor == "mqtt" else "."
        self.one, self.many = ("+", "#") if flavor == "mqtt" else ("*", ">")
        self.root = _Node()
        self._known: dict[str, frozenset[int]] = {}          # topic -> sessions, since the last change

    def _walk(self, flt: str) -> tuple[list[_Node], str]:
        levels = flt.split(self.sep)
        node, path = self.root, [self.root]
        for lv in levels[:-1]:
            node = node.children.setdefault(lv, _Node())
            path.append(node)
        return path, levels[-1]

    def add(self, flt: str, session: int) -> None:
        self._known.clear()
        path, last = self._walk(flt)
        if last == self.many:
            table = path[-1].rest
        else:
            table = path[-1].children.setdefault(last, _Node()).here
        table[session] = table.get(session, 0) + 1

    def remove(self, flt: str, session: int) -> None:
        self._known.clear()
        path, last = self._walk(flt)
        node = path[-1] if last == self.many else path[-1].children.get(last)
        table = None if node is None else (node.rest if last == self.many else node.here)
        if table and session in table:
            table[session] -= 1
            if table[session] <= 0:
                del table[session]

    def match(self, topic: str) -> frozenset[int]:
        """The sessions with a filter matching `topic`."""
        hit = self._known.get(topic)
        if hit is None:
            if len(self._known) >= KNOWN_TOPICS:
                self._known.clear()
            hit = self._known[topic] = frozenset(self._match(topic))
        return hit

    def _match(self, topic: str) -> set[int]:
        levels = topic.split(self.sep)
        out: set[int] = set()
        mqtt = self.flavor == "mqtt"
        stack = [(self.root, 0)]
        while stack:
            node, i = stack.pop()
            if node.rest and (i < len(levels) if not mqtt else True):
                if not (mqtt and i == 0 and levels[0].startswith("$")):
                    out.update(node.rest)       # MQTT '#' also matches the parent level (i == len)
            if i == len(levels):
                out.update(node.here)
                continue
            lv = levels[i]
            exact = node.children.get(lv)
            if exact is not None:
                stack.append((exact, i + 1))
            wild = node.children.get(self.one)
            if wild is not None and not (mqtt and i == 0 and lv.startswith("$")):
                stack.append((wild, i + 1))
        return out
