"""Seeded, reproducible subscription workloads.

* ITCH (Camus paper): `stock == S and price > P : fwd(H)`, S from 100 symbols, P uniform in
  (0, 1000), H from 200 hosts.
* Siena-style synthetic: attribute names Zipf or uniform, 40% string / 60% integer
  attributes, 1-6 constraints per filter, operators = 50% < 25% > 25%, integers 0-100, strings
  from a fixed word list.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

# Real tickers first, then generated ones, so examples read naturally.
_TICKERS = ("GOOGL AAPL MSFT AMZN NVDA META TSLA BRK.B JPM V UNH XOM JNJ WMT MA PG AVGO HD CVX "
            "LLY MRK ABBV PEP KO COST ADBE CSCO TMO MCD CRM ACN NFLX ABT DHR LIN AMD TXN NKE "
            "DIS WFC PM NEE ORCL UPS INTC QCOM BMY RTX HON").replace(".", "").split()


def symbols(n: int = 100) -> list[str]:
    out = list(_TICKERS[:n])
    i = 0
    while len(out) < n:
        a, b = divmod(i, 26)
        out.append(f"SYM{chr(65 + a % 26)}{chr(65 + b)}")
        i += 1
    return out


def itch_rules(n: int, seed: int = 1, n_symbols: int = 100, n_hosts: int = 200,
               price_max: int = 1000) -> list[str]:
    rng = random.Random(seed)
    syms = symbols(n_symbols)
    return [f"stock == {rng.choice(syms)} and price > {rng.randint(1, price_max - 1)} : "
            f"fwd({rng.randint(1, n_hosts)})" for _ in range(n)]


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu").split()


@dataclass(frozen=True)
class SienaSchema:
    int_attrs: tuple[str, ...]
    str_attrs: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.int_attrs + self.str_attrs

    def spec_text(self) -> str:
        """A message-format spec with one UDP message header holding every attribute."""
        lines = ["header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }",
                 "header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag;"
                 " bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }",
                 "header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }",
                 "header event_t {"]
        lines += [f"    bit<32> {a};" for a in self.int_attrs]
        lines += [f"    bit<64> {a};" for a in self.str_attrs]
        lines += ["}", "struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; event_t event; }",
                  "@pragma udp_port(9100)"]
        lines += [f"@pragma query_field(event.{a})" for a in self.names]
        lines += [f"@pragma query_type(event.{a}, string)" for a in self.str_attrs]
        return "\n".join(lines) + "\n"


def siena_schema(n_attrs: int = 10, seed: int = 1) -> SienaSchema:
    rng = random.Random(seed)
    n_str = round(n_attrs * 0.4)
    kinds = ["s"] * n_str + ["i"] * (n_attrs - n_str)
    rng.shuffle(kinds)
    ints = tuple(f"a{i}" for i, k in enumerate(kinds) if k == "i")
    strs = tuple(f"a{i}" for i, k in enumerate(kinds) if k == "s")
    return SienaSchema(ints, strs)


def siena_rules(n: int, schema: SienaSchema, seed: int = 1, zipf: bool = True,
                n_hosts: int = 16, max_constraints: int = 6) -> list[str]:
    rng = random.Random(seed)
    names = list(schema.names)
    weights = [1 / (i + 1) for i in range(len(names))] if zipf else [1.0] * len(names)
    out = []
    for _ in range(n):
        k = rng.randint(1, min(max_constraints, len(names)))
        chosen: list[str] = []
        while len(chosen) < k:
            a = rng.choices(names, weights)[0]
            if a not in chosen:
                chosen.append(a)
        parts = []
        for a in chosen:
            op = rng.choices(["==", "<", ">"], [50, 25, 25])[0]
            if a in schema.str_attrs:
                parts.append(f'{a} {op} "{rng.choice(WORDS)}"')
            else:
                parts.append(f"{a} {op} {rng.randint(0, 100)}")
        out.append(" and ".join(parts) + f" : fwd({rng.randint(1, n_hosts)})")
    return out


def siena_message(schema: SienaSchema, rng: random.Random) -> str:
    """A 'name=value ...' message in the same value ranges as the filters."""
    items = [f"{a}={rng.randint(0, 101)}" for a in schema.int_attrs]
    items += [f"{a}={rng.choice(WORDS)}" for a in schema.str_attrs]
    return " ".join(items)


def itch_messages(n: int, seed: int = 1, stocks: list[str] | None = None,
                  price_max: int = 2_000_000) -> list[dict[str, object]]:
    """ITCH Add Order field values (stock as text) for feeds and examples."""
    rng = random.Random(seed)
    names = stocks or symbols(100)
    return [{"stock": rng.choice(names), "price": rng.randint(1, price_max),
             "shares": rng.randint(1, 5000), "buy_sell_indicator": rng.choice("BS")}
            for _ in range(n)]


# -- sensor events: a second multi-attribute workload, written as an IoT user would ----------

SENSOR_SPEC = """header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
                bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header reading_t {
    bit<16> site;
    bit<8>  kind;
    bit<8>  alarm;
    bit<32> temperature;
    bit<32> humidity;
    bit<32> pressure;
    bit<16> battery;
    bit<16> zone;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; reading_t reading; }
@pragma udp_port(9200)
@pragma query_field(reading.site)
@pragma query_field(reading.kind)
@pragma query_field(reading.alarm)
@pragma query_field(reading.temperature)
@pragma query_field(reading.humidity)
@pragma query_field(reading.pressure)
@pragma query_field(reading.battery)
@pragma query_field(reading.zone)
"""

# attribute -> (low, high) of the values rules and readings use
SENSOR_RANGES = {"site": (0, 500), "kind": (0, 11), "alarm": (0, 3), "temperature": (0, 12000),
                 "humidity": (0, 1000), "pressure": (90000, 110000), "battery": (0, 100), "zone": (0, 64)}


def sensor_rules(n: int, seed: int = 1, n_hosts: int = 32) -> list[str]:
    """Filters over 8 reading attributes: 1-5 constraints with == != < <= > >=, a fifth of the
    filters with one `or` between two constraints; site and kind mostly by equality."""
    rng = random.Random(seed)
    names = list(SENSOR_RANGES)
    out = []

    def constraint(a: str) -> str:
        lo, hi = SENSOR_RANGES[a]
        op = (rng.choices(["==", "!="], [85, 15])[0] if a in ("site", "kind", "alarm")
              else rng.choice(["==", "!=", "<", "<=", ">", ">="]))
        return f"{a} {op} {rng.randint(lo, hi)}"

    for _ in range(n):
        chosen = rng.sample(names, rng.randint(1, 5))
        parts = [constraint(a) for a in chosen]
        if len(parts) >= 2 and rng.random() < 0.2:
            parts[0:2] = [f"({parts[0]} or {parts[1]})"]
        out.append(" and ".join(parts) + f" : fwd({rng.randint(1, n_hosts)})")
    return out


def sensor_message(rng: random.Random) -> str:
    return " ".join(f"{a}={rng.randint(lo, hi)}" for a, (lo, hi) in SENSOR_RANGES.items())


# -- topics (apps/topics/topics.p4): hierarchical MQTT topics, Zipf-popular, with wildcards ----
TOPIC_SITES, TOPIC_DEVICES = 50, 40
TOPIC_METRICS = ("temp", "humidity", "pressure", "power", "status", "alarm")


def _zipf(rng: random.Random, n: int, s: float = 1.1) -> int:
    """An index in [0, n) with Zipf-like popularity (index 0 the most popular)."""
    return min(n - 1, int(n ** rng.random() ** s) - 1)


def topic_name(rng: random.Random) -> str:
    """A publication's topic: site<s>/dev<d>/<metric>, sites and devices Zipf-popular."""
    return (f"site{_zipf(rng, TOPIC_SITES)}/dev{_zipf(rng, TOPIC_DEVICES)}/"
            f"{TOPIC_METRICS[_zipf(rng, len(TOPIC_METRICS))]}")


def topic_filters(n: int, seed: int = 1) -> list[str]:
    """MQTT filters like subscribers write them: exact topics (half), one `+` level (a quarter),
    `#` tails (a sixth), and a few site-wide or metric-wide ones."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        site, dev = f"site{_zipf(rng, TOPIC_SITES)}", f"dev{_zipf(rng, TOPIC_DEVICES)}"
        metric = TOPIC_METRICS[_zipf(rng, len(TOPIC_METRICS))]
        kind = rng.random()
        if kind < 0.5:
            out.append(f"{site}/{dev}/{metric}")
        elif kind < 0.75:
            out.append(rng.choice([f"{site}/+/{metric}", f"+/{dev}/{metric}", f"{site}/{dev}/+"]))
        elif kind < 0.92:
            out.append(rng.choice([f"{site}/#", f"{site}/{dev}/#"]))
        else:
            out.append(rng.choice([f"+/+/{metric}", f"{site}/+/+", "#"]))
    return out


def topic_rules(n: int, seed: int = 1, n_hosts: int = 32) -> list[str]:
    """One rule per subscription: its filter forwarded to one of `n_hosts` edge brokers."""
    rng = random.Random(seed + 1)
    return [f'topic == "{f}" : fwd({rng.randint(1, n_hosts)})' for f in topic_filters(n, seed)]
