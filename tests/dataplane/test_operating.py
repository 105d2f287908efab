"""Operating an attached classifier (root, namespaces): `status --json` and `stats --json` carry
their documented fields, and the Prometheus metrics serve the same counters, moving with
traffic through a real veth (parsed by the client library's own parser)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from camus.cli import main
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.compile import CompileOptions, compile_rules
from camus.compiler.language.spec_parser import load_spec
from camus.dataplane import metrics, runtime
from camus.dataplane import installed as state
from tests.conftest import APPS
from tests.dataplane.vethlab import send_from, sh, veth_pair

pytestmark = pytest.mark.netns
NS, PUB, BRK = "camus-test-ops", "cxo-pub0", "cxo-brk0"
RULES = "stock == GOOGL : fwd(1)\nstock == MSFT and price > 50 : fwd(2)\n"


@pytest.fixture
def attached(tmp_path):
    with veth_pair(NS, PUB, BRK, "10.78.0"):
        try:
            spec_path = APPS / "itch" / "itch.p4"
            rules_path = tmp_path / "rules.txt"
            rules_path.write_text(RULES)
            spec = load_spec(spec_path)
            runtime.attach(BRK, compile_rules(spec, RULES, options=CompileOptions(count_rules=64)), str(spec_path),
                           str(rules_path), "generic")
            yield spec
        finally:
            if state.state_path(BRK).exists():
                runtime.detach(BRK)


def feed(spec, count: int) -> int:
    """Send `count` two-message packets from the publisher; wait until the classifier counted
    them (bounded: a slow machine takes longer, never forever). Returns the packets counter."""
    mac = bytes.fromhex(sh("cat", f"/sys/class/net/{BRK}/address").stdout.strip().replace(":", ""))
    frame = build_packet(spec, [message_from_text(spec, "stock=GOOGL price=10"),
                                message_from_text(spec, "stock=IBM price=10")],
                         dst_mac=mac, src_ip="10.78.0.1", dst_ip="10.78.0.2")
    before = runtime.stats(BRK)["packets"]
    send_from(NS, PUB, [frame] * count)
    deadline = time.monotonic() + 30
    while (now := runtime.stats(BRK)["packets"]) < before + count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert now >= before + count, "the classifier did not count the packets sent"
    return now


def test_status_and_stats_json_carry_their_fields(attached) -> None:
    feed(attached, 3)
    out = CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False).stdout
    doc = json.loads(out)
    unit = next(u for u in doc["units"] if u["unit"] == BRK)
    assert doc["schema"] == 1 and unit["iface"] == BRK and unit["mode"] == "generic" and unit["rules"] == 2
    assert unit["program"]["id"] > 0 and len(unit["program"]["tag"]) == 16 and unit["program"]["name"]
    assert unit["attached_at"] > time.time() - 3600 and unit["live_root"] == unit["root"]
    assert {"states_per_bank", "bitvector_terms", "segments"} <= set(unit["capacity"])
    text = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
    assert f"id {unit['program']['id']}" in text and unit["program"]["tag"] in text, text
    assert unit["held_by"] is None
    from camus.compiler.compile import CompileOptions
    from camus.dataplane.live import LiveClassifier
    with LiveClassifier(BRK, CompileOptions(), holder="a test's live classifier") as lc:   # as a host agent does
        doc = json.loads(CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False).stdout)
        assert next(u for u in doc["units"] if u["unit"] == BRK)["held_by"] == "a test's live classifier"
        text = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
        assert "held for live changes by a test's live classifier" in text and "lag" not in text, text
        lc.apply(["stock == AAPL : fwd(1)"], [])                   # a delta, not saved yet: the record lags
        text = CliRunner().invoke(main, ["status"], catch_exceptions=False).output
        assert "a test's live classifier has changed the tables since it last saved" in text, text
        assert "warning: the maps serve" not in text, text
        refused = CliRunner().invoke(main, ["detach", BRK])
        assert refused.exit_code == 1 and "held for live changes" in refused.output, refused.output

    stats = json.loads(CliRunner().invoke(main, ["stats", BRK, "--json"], catch_exceptions=False).stdout)
    got = stats["units"][BRK]
    assert got["packets"]["packets"] >= 3 and got["messages"]["messages"] >= 6       # two messages a packet
    assert "no_match" in got["packets"] and "explicit_drop" in got["messages"]
    assert [r["rule"] for r in got["rules"]] == [ln for ln in RULES.splitlines()]
    assert got["rules"][0]["messages"] >= 3 and stats["kernel"]["rx_packets"] >= 3
    shown = CliRunner().invoke(main, ["stats", BRK], catch_exceptions=False).output
    assert "packets:" in shown and "messages:" in shown and "packets=" in shown, shown


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metrics_serve_the_counters_and_move_with_traffic(attached) -> None:
    feed(attached, 2)
    first = _samples(generate_latest(metrics.registry()).decode())
    key = ("camus_xdp_packets_total", (("unit", BRK),))
    assert first[key] == runtime.stats(BRK)["packets"]
    assert first[("camus_xdp_messages_total", (("unit", BRK),))] >= 4
    assert first[("camus_xdp_no_match_packets_total", (("unit", BRK),))] >= 0
    assert first[("camus_xdp_rules", (("unit", BRK),))] == 2
    assert ("camus_xdp_interface_rx_packets_total", (("iface", BRK),)) in first
    # no total beside its parts under one label: every family's labels are what it is split by
    assert not any(dict(labels).get("counter") for _, labels in first)
    texts = {dict(lb)["rule"]: dict(lb)["text"] for name, lb in first if name == "camus_xdp_rule_info"}
    counted = {dict(lb)["rule"] for name, lb in first if name == "camus_xdp_rule_messages_total"}
    assert counted and counted == set(texts) and set(texts.values()) <= set(RULES.splitlines())
    info = [k for k in first if k[0] == "camus_xdp_unit_info" and ("unit", BRK) in k[1]]
    assert info and dict(info[0][1])["prog_tag"]
    after = feed(attached, 5)
    assert _samples(generate_latest(metrics.registry()).decode())[key] == after >= first[key] + 5

    # the command serves the same over HTTP (started as the operator would, stopped at the end)
    proc = subprocess.Popen([sys.executable, "-c", "from camus.cli import main; main()", "metrics",
                             "--listen", "127.0.0.1:19435"], stderr=subprocess.PIPE, text=True)
    try:
        assert "serving" in (proc.stderr.readline() if proc.stderr else "")     # it says so once listening
        body = urllib.request.urlopen("http://127.0.0.1:19435/metrics", timeout=30).read().decode()
        assert _samples(body)[key] >= after
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_update_json_says_what_changed(attached, tmp_path) -> None:
    newer = tmp_path / "newer.txt"
    newer.write_text(RULES + "stock == AAPL : fwd(1)\n")
    out = CliRunner().invoke(main, ["update", BRK, "--rules", str(newer), "--json"], catch_exceptions=False).stdout
    doc = json.loads(out)
    assert doc["schema"] == 1 and doc["unit"] == BRK and doc["written"] is True and doc["removed"] == []
    assert doc["added"] == ["stock == AAPL : fwd(1)"] and doc["ms"] > 0 and doc["new_entries"] >= 1
    again = json.loads(CliRunner().invoke(main, ["update", BRK, "--rules", str(newer), "--json"],
                                          catch_exceptions=False).stdout)
    assert again["written"] is False and again["added"] == again["removed"] == []


def test_an_update_to_rules_already_live_compiles_nothing(attached, tmp_path, monkeypatch) -> None:
    """Re-running an update with the rules the tables hold (a configuration tool does, every
    run) is found from the file's parse alone: nothing compiled, nothing written, the file
    recorded; a file that says anything else is compiled and written."""
    from camus import cli_dataplane

    def no_compile(*args, **kwargs):            # noqa: ANN002, ANN003, ANN202
        raise AssertionError("compiled rules the live tables already hold")

    same = tmp_path / "same.txt"
    same.write_text("# the same rules, laid out otherwise\n\n" + RULES.replace("\n", "   # note\n"))
    monkeypatch.setattr(cli_dataplane, "compile_for", no_compile)
    res = CliRunner().invoke(main, ["update", BRK, "--rules", str(same), "--json"], catch_exceptions=False)
    assert res.exit_code == 0 and json.loads(res.stdout)["written"] is False, res.output
    assert state.load_installed(BRK).rules == str(same.resolve())
    monkeypatch.undo()
    other = tmp_path / "other.txt"
    other.write_text(RULES.replace("price > 50", "price > 60"))
    doc = json.loads(CliRunner().invoke(main, ["update", BRK, "--rules", str(other), "--json"],
                                        catch_exceptions=False).stdout)
    assert doc["written"] is True and doc["added"] == ["stock == MSFT and price > 60 : fwd(2)"]


def test_attach_json_describes_the_unit_as_status_does(tmp_path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text(RULES)
    with veth_pair(NS, PUB, BRK, "10.78.0"):
        try:
            out = CliRunner().invoke(main, ["attach", BRK, "--spec", str(APPS / "itch" / "itch.p4"), "--rules",
                                            str(rules), "--mode", "generic", "--json"], catch_exceptions=False).stdout
            doc = json.loads(out)
            assert doc["schema"] == 1 and doc["unit"] == BRK and doc["rules"] == 2 and doc["entries"] >= 1
            status = json.loads(CliRunner().invoke(main, ["status", "--json"], catch_exceptions=False).stdout)
            mine = next(u for u in status["units"] if u["unit"] == BRK)
            assert doc["program"] == mine["program"] and doc["program"]["id"] > 0
        finally:
            if state.state_path(BRK).exists():
                runtime.detach(BRK)
