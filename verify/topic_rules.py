"""Topic, subject and DNS-name relations as formulas over a topic's message variables.

The message spec (compiler/language/topics.py: `expand`, `derived_values`) gives a topic field
to the tables as variables: its depth (the number of levels), for MQTT whether level 0 starts
with '$', and the bytes of each of its first K levels (0 past the depth). What a filter means is
read here from its flavor's own rules -- MQTT 3.1.1 section 4.7, NATS subjects, RFC 4592's
leftmost `*` for DNS names -- stated on those variables; only the filter's syntax check and the
message's value encoding (the parser and the message spec) are shared with the compiler, never
its lowering of filters.

`domain` is what every real message satisfies: MQTT and NATS topics have at least one level,
levels past the depth are empty, and MQTT's '$' flag agrees with level 0's first byte. No message
lies outside it, so the tables may give anything there.
"""
from __future__ import annotations

from camus.compiler.language import topics as tp
from camus.compiler.language.topics import Topic

from .formulas import TRUE, Formula, conjunction

DOLLAR = 0x24           # '$': MQTT's wildcards never match a topic whose first level starts with it


class TopicVariables:
    """Where a topic's variables are among the checker's levels (query fields, in spec order)."""

    def __init__(self, t: Topic, level_of: dict[str, int]) -> None:
        self.t = t
        head = f"{t.instance}.{t.name}"
        self.depth = level_of[f"{head}/depth"]
        self.sys = level_of.get(f"{head}/sys")
        self.levels = [level_of[f"{head}/{i}"] for i in range(t.levels)]
        self.depth_top = (1 << tp.DEPTH_WIDTH) - 1

    def depth_at_least(self, n: int) -> Formula:
        return ("atom", self.depth, ((n, self.depth_top),)) if n > 0 else TRUE

    def depth_is(self, n: int) -> Formula:
        return ("atom", self.depth, ((n, n),))

    def level_is(self, i: int, text: bytes) -> Formula:
        v = tp.level_value(self.t, text)
        return ("atom", self.levels[i], ((v, v),))

    def dollar_levels(self) -> tuple[int, int]:
        """Level 0 values whose first byte is '$'."""
        free = self.t.width - 8
        return DOLLAR << free, ((DOLLAR + 1) << free) - 1


def filter_formula(v: TopicVariables, flt: str) -> Formula:
    """The messages whose topic matches `flt` (TopicError for a filter its flavor forbids)."""
    t = v.t
    if t.flavor == "dns":
        labels, wild = tp.check_dns_filter(t, flt)          # from the right, lower-cased
        depth = v.depth_at_least(len(labels) + 1) if wild else v.depth_is(len(labels))
        return conjunction([depth, *(v.level_is(i, lv.encode("ascii")) for i, lv in enumerate(labels))])
    levels = tp.check_filter(t, flt)
    one, many = ("+", "#") if t.flavor == "mqtt" else ("*", ">")
    parts: list[Formula] = []
    if levels[-1] == many:
        # MQTT's '#' at level i matches level i and below, the parent included (depth >= i);
        # NATS's '>' needs one token or more there (depth >= i + 1)
        i = len(levels) - 1
        parts.append(v.depth_at_least(i if t.flavor == "mqtt" else i + 1))
    else:
        parts.append(v.depth_is(len(levels)))
    if t.flavor == "mqtt" and levels[0] in (one, many):
        assert v.sys is not None
        parts.append(("atom", v.sys, ((0, 0),)))
    parts += [v.level_is(i, lv.encode("utf-8")) for i, lv in enumerate(levels) if lv not in (one, many)]
    return conjunction(parts)


def domain(v: TopicVariables) -> Formula:
    """What every message's variables for this topic satisfy."""
    t = v.t
    parts: list[Formula] = []
    if t.flavor != "dns":                # any topic text splits into one level at least; a DNS
        parts.append(v.depth_at_least(1))    # name may be the root (or malformed): depth 0
    for i, lv in enumerate(v.levels):    # a level past the depth is empty
        parts.append(("or", (v.depth_at_least(i + 1), ("atom", lv, ((0, 0),)))))
    if v.sys is not None and v.levels:
        dollar = v.dollar_levels()
        top = (1 << t.width) - 1
        not_dollar = tuple(s for s in ((0, dollar[0] - 1), (dollar[1] + 1, top)) if s[0] <= s[1])
        parts.append(("or", (("and", (("atom", v.sys, ((1, 1),)), ("atom", v.levels[0], (dollar,)))),
                             ("and", (("atom", v.sys, ((0, 0),)), ("atom", v.levels[0], not_dollar))))))
    return conjunction(parts)


LEVEL_CHARS = b"abcdefghijklmnopqrstuvwxyz0123456789"


def real_level(t: Topic, v: int) -> bool:
    """Can a message's level have value `v`: its bytes, then NUL padding (no NUL inside, no
    separator; a DNS label lower-case, as the data plane reads it)?"""
    data = v.to_bytes(t.nbytes, "big").rstrip(b"\0")
    return b"\0" not in data and t.sep not in data and (not t.reversed or data == data.lower())


def level_in(t: Topic, lo: int, hi: int) -> int:
    """A value in [lo, hi] a real level can have, for a counterexample a person can send (every
    value of the piece goes the same way through rules and tables); `lo` when none is found."""
    if real_level(t, lo):
        return lo
    head = lo.to_bytes(t.nbytes, "big").split(b"\0", 1)[0]      # lo's bytes before its first NUL
    for k in range(len(head), -1, -1):
        for c in LEVEL_CHARS:
            data = head[:k] + bytes([c])
            if len(data) > t.nbytes:
                continue
            v = int.from_bytes(data.ljust(t.nbytes, b"\0"), "big")
            if lo <= v <= hi and real_level(t, v):
                return v
    return lo


def topic_text(t: Topic, values: dict[str, int]) -> str | None:
    """The topic a message with these variable values carries (levels past the K a spec names
    are left out), or None when the values name none."""
    head = f"{t.instance}.{t.name}"
    depth = values.get(f"{head}/depth")
    if depth is None or depth > t.levels:
        return None
    levels = []
    for i in range(depth):
        data = values.get(f"{head}/{i}", 0).to_bytes(t.nbytes, "big").rstrip(b"\0")
        levels.append(data.decode("utf-8", "replace"))
    return (".".join(levels[::-1]) if t.reversed else t.sep.decode().join(levels)) if levels else ""
