"""Hypothesis strategies: random specs, rule files and messages for differential tests."""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

PREFIX = """
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;
                bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
"""


@dataclass(frozen=True)
class FieldDef:
    name: str
    width: int
    kind: str          # auto | exact | range | lpm
    string: bool
    pool: tuple[int, ...]   # constants rules draw from (so rules overlap)


@dataclass(frozen=True)
class RandomSpec:
    fields: tuple[FieldDef, ...]
    counter: bool
    mold: bool = False      # messages batched in MoldUDP64 (else one message per packet)

    def text(self) -> str:
        body = "".join(f"    bit<{f.width}> {f.name};\n" for f in self.fields)
        used = sum(f.width for f in self.fields)
        if used % 8:
            body += f"    bit<{8 - used % 8}> pad;\n"
        mold = "moldudp64_t moldudp64; " if self.mold else ""
        lines = [PREFIX, "header moldudp64_t { bit<80> session; bit<64> seq; bit<16> count; }",
                 "header msg_t {\n" + body + "}",
                 f"struct headers {{ ethernet_t ethernet; ipv4_t ipv4; udp_t udp; {mold}msg_t msg; }}",
                 "@pragma udp_port(7000)", "@pragma query_action(mark)"]
        for f in self.fields:
            suffix = "" if f.kind == "auto" else f"_{f.kind}"
            lines.append(f"@pragma query_field{suffix}(msg.{f.name})")
            if f.string:
                lines.append(f"@pragma query_type(msg.{f.name}, string)")
        if self.counter:
            lines.append("@pragma query_counter(win, 1000, 64)")
            lines.append("@pragma query_counter(seq, 0, 64)")       # every(n)'s endless count
        return "\n".join(lines) + "\n"


WORDS = ["A", "AB", "B", "BA", "ZZ"]


def _word_value(word: str, width: int) -> int:
    data = word.encode() + b" " * (width // 8 - len(word))
    return int.from_bytes(data, "big")


@st.composite
def field_defs(draw, index: int) -> FieldDef:
    string = draw(st.booleans()) and index == 0 and draw(st.booleans())
    if string:
        width = draw(st.sampled_from([16, 24]))
        kind = draw(st.sampled_from(["auto", "exact", "lpm"]))
        pool = tuple(_word_value(w, width) for w in WORDS)
        return FieldDef(f"f{index}", width, kind, True, pool)
    width = draw(st.sampled_from([4, 8, 12, 16, 32]))
    kinds = ["auto", "exact", "range"] + (["lpm"] if width in (8, 16, 32) else [])
    kind = draw(st.sampled_from(kinds))
    top = (1 << width) - 1
    pool = tuple(sorted(set(draw(st.lists(st.integers(0, top), min_size=2, max_size=5))) | {0, top}))
    return FieldDef(f"f{index}", width, kind, False, pool)


@st.composite
def random_specs(draw, allow_counter: bool = False) -> RandomSpec:
    n = draw(st.integers(1, 4))
    return RandomSpec(tuple(draw(field_defs(i)) for i in range(n)), allow_counter)


@st.composite
def relations(draw, spec: RandomSpec, camus_syntax: bool) -> str:
    f = draw(st.sampled_from(spec.fields))
    name = f"msg.{f.name}" if draw(st.booleans()) else f.name
    eq = "=" if camus_syntax else "=="
    if f.string:
        word = draw(st.sampled_from(WORDS))
        if f.kind == "exact":
            op = draw(st.sampled_from([eq, "!="]))
        else:
            op = draw(st.sampled_from([eq, "!=", "prefix"] + (["<", ">="] if f.kind == "auto" else [])))
        if op == "prefix":
            word = word[:draw(st.integers(1, len(word)))]
        return f'{name} {op} "{word}"'
    value = draw(st.sampled_from(f.pool))
    if f.kind == "exact":
        op = draw(st.sampled_from([eq, "!="]))
        return f"{name} {op} {value}"
    if f.kind == "lpm":
        plen = draw(st.integers(0, f.width))
        value = (value >> (f.width - plen)) << (f.width - plen) if plen else 0
        op = draw(st.sampled_from([eq, "!="]))
        return f"{name} {op} {value}/{plen}"
    op = draw(st.sampled_from([eq, "!=", "<", "<=", ">", ">="]))
    if draw(st.integers(0, 9)) == 0:
        return f"{name} {op} 0x{value:x}"
    return f"{name} {op} {value}"


@st.composite
def filters(draw, spec: RandomSpec, depth: int = 0, camus_syntax: bool = False,
            state: bool = False) -> str:
    choice = draw(st.integers(0, 9 if depth < 2 else 4))
    if choice <= 4:
        if state and draw(st.integers(0, 6)) == 0:
            f = draw(st.sampled_from([f for f in spec.fields if not f.string] or list(spec.fields)))
            fn = draw(st.sampled_from(["count", "sum", "avg", "every"]))
            if fn == "every":
                return f"every({draw(st.integers(1, 4))})"
            op = draw(st.sampled_from(["<", ">", ">=", "=="]))
            return f"{fn}(msg.{f.name}, win) {op} {draw(st.integers(0, 6))}"
        return draw(relations(spec, camus_syntax))
    if choice <= 6:
        inner = draw(filters(spec, depth + 1, camus_syntax, state))
        neg = "! " if camus_syntax or draw(st.booleans()) else "not "
        return f"{neg}({inner})" if " " in inner.strip() else f"{neg}{inner}"
    op = draw(st.sampled_from(["and", "or"]))
    left = draw(filters(spec, depth + 1, camus_syntax, state))
    right = draw(filters(spec, depth + 1, camus_syntax, state))
    return f"({left} {op} {right})"


@st.composite
def actions(draw) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return "drop"
    if kind == 1:
        return f"mark({draw(st.integers(1, 3))})"
    ports = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    return "fwd(" + ", ".join(map(str, ports)) + ")"


@st.composite
def rule_files(draw, spec: RandomSpec, state: bool = False) -> str:
    n = draw(st.integers(1, 8))
    camus = draw(st.booleans())
    lines = []
    for _ in range(n):
        filt = draw(filters(spec, 0, camus, state))
        acts = ", ".join(draw(st.lists(actions(), min_size=1, max_size=2)))
        lines.append(f"{filt} : {acts}" + (";" if camus else ""))
    return "\n".join(lines) + "\n"


@st.composite
def messages(draw, spec: RandomSpec, n: int = 12) -> list[dict[str, int]]:
    out = []
    for _ in range(n):
        m = {}
        for f in spec.fields:
            top = (1 << f.width) - 1
            base = draw(st.sampled_from(f.pool))
            m[f"msg.{f.name}"] = draw(st.sampled_from(
                [base, min(top, base + 1), max(0, base - 1), 0, top, draw(st.integers(0, top))]))
        out.append(m)
    return out
