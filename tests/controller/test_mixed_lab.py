"""A mixed deployment end to end (root, netns): a publisher, an XDP host broker (camus-xdp with
its agent), a P4 switch simulated in software behind a veth, driven by the controller over
P4Runtime only (gRPC; a unix socket, since the switch lives in another network namespace), four
subscribers (two behind each device). Subscriptions go through the HTTP API: every subscriber
gets exactly its messages; subscribing and unsubscribing change deliveries within a second; a
subscription whose TTL lapses stops being delivered; a killed and restarted switch is
re-synchronised."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from camus.lab.namespaces import CAPTURE_SCRIPT, SENDER_SCRIPT, Lab, mold_order_refs, processes, sh
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.language.spec_parser import load_spec
from camus.controller.client import SubscriptionClient
from tests.conftest import APPS

pytestmark = [pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]
SPEC = APPS / "itch" / "itch.p4"
CTL, AGENT = "127.0.0.1:9310", "127.0.0.1:9311"
TOKENS = {"tok1": "h1", "tok2": "h2", "tok3": "h3", "tok4": "h4"}
STOCKS = ["GOOGL", "AAPL", "MSFT", "TSLA", "IBM"]


def _wait_http(url: str, ca: str | None = None) -> None:
    import ssl
    import urllib.request
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=0.2, context=ctx)
            return
        except Exception as exc:                          # 401 means it is up
            if getattr(exc, "code", None) == 401:
                return
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@pytest.fixture
def mixed(tmp_path: Path):
    yield from _mixed(tmp_path, tls=False)


@pytest.fixture
def mixed_tls(tmp_path: Path):
    yield from _mixed(tmp_path, tls=True)


def _mixed(tmp_path: Path, tls: bool):
    """The lab; with `tls`, every channel over TLS (a private CA: controller, agent, switch
    certificates; the agent and the switch take only the controller's certificate)."""
    pki = None
    if tls:
        from camus.controller.tls import make_pki
        pki = make_pki(tmp_path / "pki", {p: ["localhost", "127.0.0.1"] for p in ("controller", "h1", "h2", "sw")})
    scheme = "https" if tls else "http"
    with Lab("camus-mix", subscribers=3, net="10.77", remote_endpoint=False) as lab:
        sw_ns = lab.sub_ns(3)                             # subscriber slot 3 hosts the switch
        for i in (1, 2):                                   # the switch's two subscribers
            ns = f"camus-mix-x{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", sw_ns, "ip", "link", "add", f"swp{i}", "type", "veth", "peer", "name",
               f"x{i}", "netns", ns)
            sh("ip", "netns", "exec", sw_ns, "ip", "link", "set", f"swp{i}", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"x{i}", "up")
        ports = tmp_path / "ports.yaml"
        ports.write_text("".join(f"{p}: {{iface: {lab.sub_if(p, True)}}}\n" for p in (1, 2, 3)))
        sock = f"unix:{tmp_path}/sw.sock"
        topo = {"devices": [{"name": "broker", "kind": "xdp", "agent": f"{scheme}://{AGENT}"},
                            {"name": "sw", "kind": "p4", "p4runtime": sock, "device_id": 1,
                             **({"tls_name": "sw"} if tls else {})}] +
                           [{"name": h, "kind": "host"} for h in ("pub", "h1", "h2", "h3", "h4")],
                "links": [{"a": "broker", "a_port": 1, "b": "h1", "b_port": 1},
                          {"a": "broker", "a_port": 2, "b": "h2", "b_port": 1},
                          {"a": "broker", "a_port": 3, "b": "sw", "b_port": 3},
                          {"a": "broker", "a_port": 4, "b": "pub", "b_port": 1},
                          {"a": "sw", "a_port": 1, "b": "h3", "b_port": 1},
                          {"a": "sw", "a_port": 2, "b": "h4", "b_port": 1}]}
        (tmp_path / "topo.yaml").write_text(yaml.safe_dump(topo))
        (tmp_path / "tokens.yaml").write_text(yaml.safe_dump(TOKENS))
        exe = str(Path(sys.executable).parent / "camus-xdp")
        (tmp_path / "agent.token").write_text("agent-tok\n")
        with processes() as procs:                       # stopped before the lab is torn down
            agent_tls = ["--tls-cert", pki["h1"].cert, "--tls-key", pki["h1"].key, "--tls-ca", pki["h1"].ca] if pki else []
            procs.append(subprocess.Popen([exe, "agent", lab.broker, "--spec", str(SPEC), "--ports", str(ports),
                                           "--listen", AGENT, "--token-file", str(tmp_path / "agent.token"),
                                           *agent_tls], stderr=subprocess.PIPE))
            ctl_cmd = [exe, "controller", "serve", "--topology", str(tmp_path / "topo.yaml"),
                       "--spec", str(SPEC), "--policy", "mst", "--tokens",
                       str(tmp_path / "tokens.yaml"), "--switch-dir", str(tmp_path / "sw"),
                       "--listen", CTL, "--agent-token-file", str(tmp_path / "agent.token"),
                       "--db", str(tmp_path / "ctl.db")]
            if pki:
                ctl_cmd += ["--tls-cert", pki["controller"].cert, "--tls-key", pki["controller"].key,
                            "--tls-ca", pki["controller"].ca]
            procs.append(subprocess.Popen(ctl_cmd, stderr=subprocess.DEVNULL))
            lab.ctl_cmd, lab.procs, lab.db = ctl_cmd, procs, tmp_path / "ctl.db"     # type: ignore[attr-defined]
            def start_switch() -> subprocess.Popen:
                sw_tls = (["--tls-cert", pki["sw"].cert, "--tls-key", pki["sw"].key, "--tls-client-ca", pki["sw"].ca]
                          if pki else [])
                sw = subprocess.Popen(["ip", "netns", "exec", sw_ns, sys.executable, "-m",
                                       "camus.controller.softswitch", "--grpc", sock, "--device-id", "1",
                                       "--spec", str(SPEC), "--port", f"3={lab.sub_if(3, False)}",
                                       "--port", "1=swp1", "--port", "2=swp2", *sw_tls], stdout=subprocess.PIPE,
                                      text=True)
                procs.append(sw)
                assert sw.stdout.readline().strip() == "ready"
                return sw
            lab.start_switch, lab.tmp = start_switch, tmp_path                       # type: ignore[attr-defined]
            lab.switch = start_switch()                                              # type: ignore[attr-defined]
            lab.pki, lab.sock = pki, sock                                            # type: ignore[attr-defined]
            if pki is None:
                _wait_http(f"http://{AGENT}/v1/status")
            _wait_http(f"{scheme}://{CTL}/v1/status", pki["controller"].ca if pki else None)
            yield lab


def _captures(lab: Lab, secs: float) -> dict[str, subprocess.Popen]:
    where = {"h1": (lab.sub_ns(1), lab.sub_if(1, False)), "h2": (lab.sub_ns(2), lab.sub_if(2, False)),
             "h3": ("camus-mix-x1", "x1"), "h4": ("camus-mix-x2", "x2")}
    out = {}
    for h, (ns, ifname) in where.items():
        p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", CAPTURE_SCRIPT, "raw", ifname,
                              str(secs)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        out[h] = p
    return out


def _round(lab: Lab, seed: int) -> tuple[dict[str, set[int]], dict[int, str]]:
    """Send a feed of 1-6-message packets; returns what each host got and each ref's stock."""
    spec = load_spec(SPEC)
    rng = random.Random(seed)
    frames, stock_of, ref = [], {}, seed * 1000
    for _ in range(25):
        msgs = []
        for _ in range(rng.randint(1, 6)):
            ref += 1
            s = rng.choice(STOCKS)
            stock_of[ref] = s
            m = message_from_text(spec, f"stock={s} price={rng.randint(1, 100)}")
            m["add_order.order_ref_number"] = ref
            msgs.append(m)
        frames.append(build_packet(spec, msgs, dst_mac=lab.broker_mac(), src_ip="10.77.0.1", dst_ip="10.77.0.2"))
    caps = _captures(lab, 120)                           # a bound; stopped once the feed is sent
    subprocess.run(["ip", "netns", "exec", lab.pub_ns, sys.executable, "-c", SENDER_SCRIPT, lab.pub_if, "0.002"],
                   input=" ".join(f.hex() for f in frames), text=True, check=True)
    for p in caps.values():
        p.terminate()                                    # `ip netns exec` execs python: the capture gets it
    return {h: _received_refs(p, 30) for h, p in caps.items()}, stock_of


def _received_refs(capture: subprocess.Popen, timeout: float) -> set[int]:
    """The order reference numbers in the IPv4/UDP frames a capture process saw."""
    out, _ = capture.communicate(timeout=timeout)
    refs: set[int] = set()
    for pkt in (bytes.fromhex(x) for x in json.loads(out.strip().splitlines()[-1])):
        if len(pkt) > 42 and pkt[12:14] == b"\x08\x00" and pkt[23] == 17:
            refs.update(mold_order_refs(pkt[42:]))
    return refs


def _in_sync(ctl: SubscriptionClient, timeout: float = 30.0) -> float:
    """Until every change so far is compiled and every pushed device holds its tables."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = ctl.status()
        if st["compiled_version"] == st["version"] and all(d["in_sync"] and d["applied_version"] == st["version"]
                                                           for d in st["devices"].values() if d["push_target"]):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"devices not in sync: {ctl.status()}")


def test_mixed_xdp_and_switch_deliveries_follow_the_api(mixed: Lab) -> None:
    lab = mixed
    c = {h: SubscriptionClient(f"http://{CTL}", tok) for tok, h in TOKENS.items()}
    _in_sync(c["h1"], timeout=60)          # the first push attaches: BCC compiles the XDP program
    wants = {"h1": "stock == GOOGL", "h2": "stock == MSFT or stock == TSLA", "h3": "stock == AAPL",
             "h4": "stock == GOOGL and price > 50"}
    subs = {h: c[h].subscribe(f, ttl=60) for h, f in wants.items()}
    _in_sync(c["h1"], timeout=30)          # how fast is a benchmark's business (churn_bench), not a test's
    got, stock_of = _round(lab, 1)
    spec = load_spec(SPEC)

    def expected(h: str, active: dict[str, str]) -> set[int]:
        from camus.compiler.compile import compile_rules
        from camus.compiler.semantics.interpreter import PipelineInterpreter
        if h not in active:
            return set()
        interp = PipelineInterpreter(compile_rules(spec, f"{active[h]} : fwd(1)").pipeline)
        return {r for r, s in stock_of.items() if interp.run(_values[r]).actions.ports}

    # price is needed for h4: rebuild the messages' values from the same seed
    _values = _feed_values(1)
    for h in wants:
        assert got[h] == expected(h, wants), h
        assert got[h], f"{h} should have received something"

    # unsubscribe h1 and subscribe h3 to IBM as well: effective once the devices report them applied
    c["h1"].unsubscribe(subs["h1"]["id"])
    c["h3"].subscribe("stock == IBM", ttl=60)
    _in_sync(c["h1"], timeout=30)
    got, stock_of = _round(lab, 2)
    _values = _feed_values(2)
    now = dict(wants)
    del now["h1"]
    assert got["h1"] == set()
    assert got["h3"] == {r for r, s in stock_of.items() if s in ("AAPL", "IBM")}
    assert got["h2"] == expected("h2", now)

    # a subscription whose TTL lapses stops being delivered
    short = c["h2"].subscribe("stock == IBM", ttl=1.0)
    _in_sync(c["h2"])
    got, stock_of = _round(lab, 3)
    assert any(stock_of[r] == "IBM" for r in got["h2"])
    deadline = time.monotonic() + 30                     # the TTL lapses after 1 s; the expiry runs when it can
    while any(s["id"] == short["id"] for s in c["h2"].subscriptions()):
        assert time.monotonic() < deadline, "the 1 s subscription never expired"
        time.sleep(0.1)
    _in_sync(c["h2"])
    got, stock_of = _round(lab, 4)
    assert got["h2"] and not any(stock_of[r] == "IBM" for r in got["h2"])


def _feed_values(seed: int) -> dict[int, dict[str, int]]:
    spec = load_spec(SPEC)
    rng = random.Random(seed)
    out, ref = {}, seed * 1000
    for _ in range(25):
        for _ in range(rng.randint(1, 6)):
            ref += 1
            s = rng.choice(STOCKS)
            out[ref] = message_from_text(spec, f"stock={s} price={rng.randint(1, 100)}")
    return out


def test_controller_restart_with_10k_subscriptions_loses_nothing_under_traffic(mixed: Lab) -> None:
    """10,000 live subscriptions (in the controller's database), a feed running, the controller
    killed with SIGKILL and started again in the middle of it: it comes back with every
    subscription, pushes the same tables (never empty ones), and every subscriber gets exactly
    its messages: none missing, none extra."""
    import signal
    import sqlite3

    from camus.compiler.compile import compile_rules
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    lab = mixed
    c = SubscriptionClient(f"http://{CTL}", "tok1")
    _in_sync(c, timeout=60)
    ctl = lab.procs[1]                                       # type: ignore[attr-defined]
    ctl.send_signal(signal.SIGKILL)
    ctl.wait()
    rng = random.Random(10)
    filters = {h: [f"stock == {rng.choice(STOCKS)} and price > {rng.randint(30, 99)}" for _ in range(2500)]
               for h in ("h1", "h2", "h3", "h4")}
    db = sqlite3.connect(str(lab.db))                        # type: ignore[attr-defined]
    far = time.time() + 3600
    db.executemany("INSERT INTO subscriptions (host, filter, ttl, expires) VALUES (?, ?, 3600, ?)",
                   [(h, f, far) for h, fs in filters.items() for f in fs])
    db.commit()
    db.close()

    def start() -> subprocess.Popen:
        p = subprocess.Popen(lab.ctl_cmd, stderr=subprocess.DEVNULL)    # type: ignore[attr-defined]
        lab.procs.append(p)                                  # type: ignore[attr-defined]
        _wait_http(f"http://{CTL}/v1/status")
        return p

    ctl = start()
    _in_sync(c, timeout=120)
    assert c.status()["subscriptions"] == 10_000
    digests = {d: s["applied"] for d, s in c.status()["devices"].items() if s["push_target"]}

    spec = load_spec(SPEC)
    frames, values = [], {}
    for i in range(80):                                      # 8 s of feed, one message a packet
        m = message_from_text(spec, f"stock={rng.choice(STOCKS)} price={rng.randint(1, 100)}")
        m["add_order.order_ref_number"] = 50_000 + i
        values[50_000 + i] = m
        frames.append(build_packet(spec, [m], dst_mac=lab.broker_mac(), src_ip="10.77.0.1", dst_ip="10.77.0.2"))
    caps = _captures(lab, 180)                           # a bound; stopped once the feed is sent
    from camus.dataplane import runtime
    before = runtime.stats(lab.broker)["packets"]        # what the classifier has seen
    sender = subprocess.Popen(["ip", "netns", "exec", lab.pub_ns, sys.executable, "-c", SENDER_SCRIPT, lab.pub_if,
                               "0.1"], stdin=subprocess.PIPE, text=True)
    sender.stdin.write(" ".join(f.hex() for f in frames))
    sender.stdin.close()
    deadline = time.monotonic() + 60                     # the feed under way (however slow its start)
    while runtime.stats(lab.broker)["packets"] < before + 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    ctl.send_signal(signal.SIGKILL)                          # the controller dies mid-feed
    ctl.wait()
    ctl = start()
    _in_sync(c, timeout=120)
    assert c.status()["subscriptions"] == 10_000
    after = {d: s["applied"] for d, s in c.status()["devices"].items() if s["push_target"]}
    assert after == digests                                  # the same tables, not empty ones
    sender.wait(timeout=120)
    for p in caps.values():
        p.terminate()                                    # the feed is sent: each ends once quiet
    for h, p in caps.items():
        refs = _received_refs(p, 30)
        interp = PipelineInterpreter(compile_rules(spec, "\n".join(f"{f} : fwd(1)" for f in filters[h])).pipeline)
        want = {r for r, v in values.items() if interp.run(v).actions.ports}
        got = refs & set(values)                             # this feed's messages, nothing older
        assert want and got == want, (h, sorted(want - got), sorted(got - want))   # exactly


def test_a_killed_switch_is_resynchronised_over_p4runtime(mixed: Lab) -> None:
    """The switch process dies (SIGKILL) and comes back with empty tables: the controller notices
    the broken P4Runtime session, reads back, writes what is missing, and deliveries are exact."""
    import signal
    lab = mixed
    c = {h: SubscriptionClient(f"http://{CTL}", tok) for tok, h in TOKENS.items()}
    _in_sync(c["h1"], timeout=60)
    c["h3"].subscribe("stock == AAPL", ttl=60)
    c["h4"].subscribe("stock == GOOGL or stock == TSLA", ttl=60)
    _in_sync(c["h1"])
    pushes = c["h1"].status()["devices"]["sw"]["pushes"]
    lab.switch.send_signal(signal.SIGKILL)                       # type: ignore[attr-defined]
    lab.switch.wait()                                            # type: ignore[attr-defined]
    lab.switch = lab.start_switch()                              # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while True:                                                  # until the controller has pushed again
        st = c["h1"].status()["devices"]["sw"]
        if st["pushes"] > pushes and st["in_sync"] and not st["error"]:
            break
        assert time.monotonic() < deadline, f"the switch was never re-synchronised: {st}"
        time.sleep(0.1)
    _in_sync(c["h1"], timeout=60)
    got, stock_of = _round(lab, 5)
    assert got["h3"] == {r for r, s in stock_of.items() if s == "AAPL"}
    assert got["h4"] == {r for r, s in stock_of.items() if s in ("GOOGL", "TSLA")}
    # the switch counted its deliveries per port; any client may read them (a secondary here)
    from camus.controller.p4rt_client import P4RuntimeClient
    reader = P4RuntimeClient(f"unix:{lab.tmp}/sw.sock", 1, election_id=2, primary=False)   # type: ignore[attr-defined]
    try:
        cells = reader.read_counter("camus_delivered")
    finally:
        reader.close()
    assert cells[1] > 0 and cells[2] > 0 and cells[3] == 0          # never back out of the ingress port


def test_mixed_lab_with_tls_everywhere_delivers_exactly_and_refuses_strangers(mixed_tls: Lab) -> None:
    """Issue 48: the controller's API, the agent and P4Runtime all over TLS (the agent and the
    switch take only the controller's certificate): every subscriber gets exactly its messages.
    A client that does not trust the CA, a push from another party's certificate, a P4Runtime
    client without a valid client certificate and plain HTTP to the TLS port are each refused."""
    from camus.compiler.compile import compile_rules
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    from camus.controller.client import ConnectionFailure
    from camus.controller.p4rt_client import P4RuntimeClient, P4RuntimeError
    from camus.controller.tls import TlsFiles
    lab = mixed_tls
    pki = lab.pki                                                           # type: ignore[attr-defined]
    trust = TlsFiles(ca=pki["controller"].ca)
    c = {h: SubscriptionClient(f"https://{CTL}", tok, tls=trust) for tok, h in TOKENS.items()}
    _in_sync(c["h1"], timeout=120)          # the first push attaches over https: BCC compiles the program
    wants = {"h1": "stock == GOOGL", "h2": "stock == MSFT or stock == TSLA", "h3": "stock == AAPL",
             "h4": "stock == GOOGL and price > 50"}
    for h, f in wants.items():
        c[h].subscribe(f, ttl=60)
    _in_sync(c["h1"], timeout=30)
    got, stock_of = _round(lab, 1)
    values = _feed_values(1)
    spec = load_spec(SPEC)
    for h, f in wants.items():
        interp = PipelineInterpreter(compile_rules(spec, f"{f} : fwd(1)").pipeline)
        assert got[h] == {r for r in stock_of if interp.run(values[r]).actions.ports} and got[h], h

    before = c["h1"].status()
    version_before_strangers = before["version"]
    with pytest.raises(ConnectionFailure, match="not trusted"):
        SubscriptionClient(f"https://{CTL}", "tok1").status()
    with pytest.raises(ConnectionFailure, match="use https://"):
        SubscriptionClient(f"http://{CTL}", "tok1").status()
    import http.client
    import ssl
    from camus.controller.tls import client_context
    conn = http.client.HTTPSConnection("127.0.0.1", int(AGENT.rsplit(":", 1)[1]), context=client_context(pki["h2"]))
    conn.request("POST", "/v1/tables", body=b'{"rules": "", "digest": "x"}',
                 headers={"Authorization": "Bearer agent-tok", "Content-Type": "application/json"})
    assert conn.getresponse().status == 403                                   # not the controller's certificate
    conn.close()
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        bare = http.client.HTTPSConnection("127.0.0.1", int(AGENT.rsplit(":", 1)[1]), context=client_context(trust))
        bare.request("GET", "/v1/status", headers={"Authorization": "Bearer agent-tok"})
        bare.getresponse()
    with pytest.raises(P4RuntimeError):                                       # no client certificate
        P4RuntimeClient(lab.sock, 1, 9, timeout=3.0, tls=trust, tls_name="sw")     # type: ignore[attr-defined]
    from camus.controller.tls import make_pki
    mallory = make_pki(lab.tmp / "other-ca", {"controller": ["localhost"]})["controller"]   # type: ignore[attr-defined]
    stranger = TlsFiles(mallory.cert, mallory.key, pki["controller"].ca)      # named right, signed by another CA
    with pytest.raises(P4RuntimeError):
        P4RuntimeClient(lab.sock, 1, 9, timeout=3.0, tls=stranger, tls_name="sw")      # type: ignore[attr-defined]
    _in_sync(c["h1"], timeout=30)
    after = c["h1"].status()
    assert after["version"] == version_before_strangers                       # the strangers changed nothing
    assert {d: s["applied"] for d, s in after["devices"].items()} == {d: s["applied"] for d, s in before["devices"].items()}
