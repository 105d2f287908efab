from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from camus.cli import main
from camus.cli_dataplane import compile_for
from camus.compiler.codec.packets import build_packet, message_from_text
from camus.compiler.codec.pcap import write_pcap
from camus.compiler.language.spec_parser import load_spec
from tests.conftest import APPS

SPEC, RULES = str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_compile_writes_ir_and_summary(tmp_path) -> None:
    r = run("compile", SPEC, RULES, "-o", str(tmp_path / "out"))
    assert r.exit_code == 0 and "table entries" in r.output
    doc = json.loads((tmp_path / "out" / "pipeline.json").read_text())
    assert doc["format"] == "camus-pipeline/1" and doc["rules"] == 6
    assert "multicast group" in (tmp_path / "out" / "summary.txt").read_text()
    emitted = run("compile", SPEC, RULES, "--emit")
    assert json.loads(emitted.output)["root"] == doc["root"]


def test_check_reports_every_mistake_with_position(tmp_path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("stock == GOOGL : fwd(1)\nstok == A : fwd(1)\nprice prefix \"A\" : fwd(2)\n")
    r = CliRunner().invoke(main, ["check", SPEC, str(bad)])
    assert r.exit_code == 1
    assert "bad.txt:2:1: error: unknown field 'stok'" in r.output
    assert "bad.txt:3:7:" in r.output and "nothing was compiled" in r.output
    ok = run("check", SPEC, RULES)
    assert ok.exit_code == 0 and ok.output.startswith("ok: 6 rules")


def test_check_warns_about_filters_that_can_never_match(tmp_path) -> None:
    rules = tmp_path / "r.txt"
    rules.write_text("\ufeffstock == GOOGL : fwd(1)\r\nstock == GOOGL and stock == IBM : fwd(2)\n"
                     "price > 10 and not (price > 5) : fwd(3)\n")           # a BOM and CRLF too
    r = CliRunner().invoke(main, ["check", SPEC, str(rules)])
    assert r.exit_code == 0 and "ok: 3 rules" in r.output
    assert "r.txt:2:1: this filter can never match" in r.output and "r.txt:3:1: this filter" in r.output
    assert "r.txt:1:" not in r.output


def test_explain_message_text_and_json() -> None:
    r = run("explain", SPEC, RULES, "--message", "stock=GOOGL price=60")
    assert "actions: fwd(1)" in r.output and "add_order.price" in r.output and "GOOGL" in r.output
    assert "(= GOOGL)" in r.output                      # a string table's match as text, not a number
    r = run("explain", SPEC, RULES, "--message", "stock=GOOGL price=2000000", "--message", "stock=IBM", "--json")
    lines = [json.loads(x) for x in r.output.splitlines()]
    assert lines[0]["ports"] == [1, 2] and lines[0]["group"] == 1 and lines[0]["path"]
    assert lines[1] == {"message": 1, "actions": [], "ports": [], "path": lines[1]["path"]}
    via = run("explain", SPEC, RULES, "--message", "stock=GOOGL price=2000000", "--json", "--via", "filters")
    assert json.loads(via.output)["ports"] == [1, 2] and "path" not in json.loads(via.output)


def test_explain_packets_and_pcap(tmp_path) -> None:
    spec = load_spec(SPEC)
    pkt = build_packet(spec, [message_from_text(spec, "stock=AAPL"), message_from_text(spec, "stock=JUNK")])
    r = run("explain", SPEC, RULES, "--packet", pkt.hex(), "--json")
    out = [json.loads(x) for x in r.output.splitlines()]
    assert [o["actions"] for o in out] == [["fwd(2)"], ["drop"]] and out[1]["packet"] == 0
    pcap = tmp_path / "f.pcap"
    write_pcap(pcap, [(0, pkt), (1000, pkt[:50])])
    r = run("explain", SPEC, RULES, "--pcap", str(pcap), "--json")
    out = [json.loads(x) for x in r.output.splitlines()]
    assert out[0]["packet"] == 1 and out[0]["error"].startswith("lengths disagree") and len(out) == 3


def test_explain_usage_errors() -> None:
    r = CliRunner().invoke(main, ["explain", SPEC, RULES])
    assert r.exit_code == 2 and "exactly one of --message, --packet or --pcap" in r.output
    r = CliRunner().invoke(main, ["explain", SPEC, RULES, "--message", "stok=1"])
    assert r.exit_code == 2 and "unknown or ambiguous field 'stok'" in r.output


def test_demo_runs_and_agrees() -> None:
    r = run("demo", "--messages", "60")
    assert r.exit_code == 0, r.output
    assert "delivery report" in r.output and ": OK" in r.output


def test_compile_p4_target_writes_switch_entries(tmp_path) -> None:
    r = run("compile", SPEC, RULES, "--target", "p4", "-o", str(tmp_path / "sw"))
    assert r.exit_code == 0 and "TCAM rows" in r.output and "multicast groups 2/65,535" in r.output
    cli = (tmp_path / "sw" / "entries.cli").read_text()
    assert "table_add t_add_order_price set_state" in cli and "mc_mgrp_create 1" in cli
    assert "CamusIngress.t_leaf" in (tmp_path / "sw" / "p4info.txtpb").read_text()
    assert "updates {" in (tmp_path / "sw" / "entries.txtpb").read_text()


def test_explain_via_p4_agrees_with_ir() -> None:
    msgs = ["stock=GOOGL price=2000000", "stock=JUNK", "stock=NVDA shares=1000", "stock=IBM"]
    out = {}
    for via in ("p4", "ir"):
        args = ["explain", SPEC, RULES, "--via", via, "--json"] + [x for m in msgs for x in ("--message", m)]
        out[via] = [(o["actions"], o["ports"]) for o in map(json.loads, run(*args).output.splitlines())]
    assert out["p4"] == out["ir"]


def test_compile_and_explain_via_p4_give_the_same_cover_of_a_multi_attribute_rule_set(tmp_path) -> None:
    """300 sensor filters over 8 attributes and 100 ports: the exact diagram multiplies out, so
    the switch gets a bounded cover; explain --via p4 runs that same cover (its own semantics),
    which delivers everything the rules select and more, never less."""
    import random
    from camus.bench.workloads import SENSOR_SPEC, sensor_message, sensor_rules
    from camus.compiler.ir.pipeline import Pipeline
    from camus.compiler.language.spec_parser import parse_spec
    from camus.compiler.semantics.interpreter import PipelineInterpreter
    spec_file, rules_file = tmp_path / "sensors.p4", tmp_path / "rules.txt"
    spec_file.write_text(SENSOR_SPEC)
    rules_file.write_text("\n".join(sensor_rules(300, seed=3, n_hosts=100)) + "\n")
    r = run("compile", str(spec_file), str(rules_file), "--target", "p4", "-o", str(tmp_path / "sw"))
    assert r.exit_code == 0 and "a cover: at most 1024 states per field" in r.output, r.output
    cover = PipelineInterpreter(Pipeline.from_json(json.loads((tmp_path / "sw" / "pipeline.json").read_text())))
    rng = random.Random(3)
    msgs = [sensor_message(rng) for _ in range(25)]
    out = {}
    for via in ("p4", "filters"):
        args = ["explain", str(spec_file), str(rules_file), "--via", via, "--json"] + [x for m in msgs for x in ("--message", m)]
        res = CliRunner().invoke(main, args, catch_exceptions=False)
        out[via] = [set(o["ports"]) for o in map(json.loads, res.stdout.splitlines())]
    spec = parse_spec(SENSOR_SPEC, "sensors.p4")
    tables = [set(cover.run(message_from_text(spec, m)).actions.ports) for m in msgs]
    assert out["p4"] == tables                                          # the cover's own semantics
    assert all(want <= got for want, got in zip(out["filters"], out["p4"]))
    # a cover over-delivers before its egress port filters; with them, narrow ports get what they asked for
    assert json.loads((tmp_path / "sw" / "pipeline.json").read_text())["port_filters"]["roots"]
    assert sum(map(len, out["p4"])) >= sum(map(len, out["filters"]))


def test_attach_app_arguments_are_checked_before_anything_runs(tmp_path) -> None:
    spec, rules = str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")
    runner = CliRunner()
    for arg, message in (("itch", "expected NAME=SPEC,RULES"), (f"itch={spec}", "expected NAME=SPEC,RULES"),
                         (f"itch={spec},nope.txt", "no file nope.txt")):
        out = runner.invoke(main, ["attach", "eth0", "--app", arg, "--app", f"b={spec},{rules}"])
        assert out.exit_code == 2 and message in out.output, out.output
    out = runner.invoke(main, ["attach", "eth0", "--spec", spec, "--app", f"a={spec},{rules}"])
    assert out.exit_code == 1 and "not both" in out.output
    assert "--app NAME=SPEC,RULES[,PORTS]" in runner.invoke(main, ["attach", "--help"]).output


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, b"stock == GOOGL : fwd(1)\n\xff\xfe\n",
                                     ("not " * 10000 + "stock == GOOGL : fwd(1)\n").encode(),
                                     ("(" * 10000 + "stock == GOOGL" + ")" * 10000 + " : fwd(1)\n").encode()],
                         ids=["binary", "latin1", "10000-nots", "10000-parens"])
def test_hostile_files_get_a_positioned_error_not_a_traceback(tmp_path, content: bytes) -> None:
    """Issue 40: binary files ended in UnicodeDecodeError, deep nesting in RecursionError."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    for args in (["check", SPEC, str(bad)], ["check", str(bad), RULES], ["compile", SPEC, str(bad), "--target", "p4"],
                 ["explain", SPEC, str(bad), "--message", "stock=GOOGL"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert f"{bad}:" in r.output and "error:" in r.output and "Traceback" not in r.output, (args, r.output[-500:])


def test_an_empty_rules_file_is_refused_where_it_would_drop_the_feed(tmp_path) -> None:
    """Issue 40: an empty file passed `check` silently and, attached, dropped the whole feed."""
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n")
    r = CliRunner().invoke(main, ["check", SPEC, str(empty)])
    assert r.exit_code == 0 and "no rules" in r.stderr and "--allow-empty" in r.stderr
    with pytest.raises(SystemExit):          # what attach and update compile with (they need root)
        compile_for(SPEC, str(empty))
    assert compile_for(SPEC, str(empty), allow_empty=True).rules == []
    for command in ("attach", "update"):
        assert "--allow-empty" in CliRunner().invoke(main, [command, "--help"]).output


@pytest.mark.parametrize("message, words", [("price=abc", "holds numbers"), ("price=-5", "does not fit"),
                                            ("price=4294967296", "does not fit"), ("stock=TOOLONGSYMBOL", "longer")])
def test_explain_refuses_values_that_do_not_fit_the_field(message: str, words: str) -> None:
    r = CliRunner().invoke(main, ["explain", SPEC, RULES, "--message", message])
    assert r.exit_code == 2 and words in r.output, r.output
    ok = CliRunner().invoke(main, ["explain", SPEC, RULES, "--message", "stock=GOOGL price=60 buy_sell_indicator=S"])
    assert ok.exit_code == 0, ok.output


def test_large_rule_files_say_what_stage_they_are_in(tmp_path, monkeypatch) -> None:
    """Issue 40: `check` on a 50 MB file ran for minutes with no output at all."""
    import camus.compiler.compile as compile_mod
    quiet = CliRunner().invoke(main, ["check", SPEC, RULES])
    assert quiet.stderr == ""                                           # small files: nothing extra
    monkeypatch.setattr(compile_mod, "PROGRESS_BYTES", 100)          # "large" for the test
    rules = tmp_path / "many.txt"
    rules.write_text("".join(f"stock == S{i} and price > {i} : fwd({i % 7 + 1})\n" for i in range(50)))
    r = CliRunner().invoke(main, ["check", SPEC, str(rules)])
    assert r.exit_code == 0 and r.stdout.startswith("ok: 50 rules")
    assert "MB of rules; parsing" in r.stderr and "50 rules parsed in" in r.stderr and "tables built" in r.stderr


def test_the_controller_is_given_as_host_port_or_a_url() -> None:
    """Issue 46: `--controller localhost:19000` failed with "unknown url type"."""
    from camus.controller.client import SubscriptionClient, controller_url
    assert controller_url("localhost:19000") == "http://localhost:19000"
    assert controller_url("https://ctl.example:8443/") == "https://ctl.example:8443"
    assert SubscriptionClient("127.0.0.1:9000", "t").url == "http://127.0.0.1:9000"
    with pytest.raises(ValueError, match="host:port or an http"):
        controller_url("ftp://x")
    r = CliRunner().invoke(main, ["subscriptions", "--controller", "ftp://x", "--token", "t"])
    assert r.exit_code == 2 and "host:port or an http" in r.output
    r = CliRunner().invoke(main, ["subscriptions", "--controller", "127.0.0.1:1", "--token", "t"])
    assert r.exit_code == 1 and "unknown url type" not in r.output           # reached the network, refused


def test_controller_serve_refuses_a_switch_without_a_layer_for_a_layered_policy(tmp_path) -> None:
    """Issue 46: a switch lacking `layer:` ended `controller serve` in a traceback."""
    import subprocess
    import sys
    (tmp_path / "topo.yaml").write_text("name: t\ndevices:\n  - {name: sw1, kind: p4}\n  - {name: h1, kind: host}\n"
                                       "links:\n  - {a: sw1, a_port: 1, b: h1, b_port: 1}\n")
    (tmp_path / "tokens.yaml").write_text("tok1: h1\n")
    out = subprocess.run([sys.executable, "-c", "from camus.cli import main; main()", "controller", "serve",
                          "--topology", "topo.yaml",
                          "--spec", SPEC, "--policy", "mr", "--tokens", "tokens.yaml", "--switch-dir", "sw",
                          "--listen", "127.0.0.1:1"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-1500:]
    assert "sw1 has none or another" in out.stderr and "--policy mst" in out.stderr


def test_apps_lists_every_shipped_spec_under_a_header_and_each_checks() -> None:
    """`apps` has a header and lists folders with several specs as FOLDER/SPEC (attrs/*,
    camus_compat/*), each with rules that check against its spec."""
    from camus.cli import main as cli_main
    from click.testing import CliRunner
    out = CliRunner().invoke(cli_main, ["apps"], catch_exceptions=False).output.splitlines()
    assert out[0].split() == ["APP", "SPEC", "RULES"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in out[1:]}
    assert {"itch", "attrs/bitmask", "attrs/pairs", "camus_compat/car", "camus_compat/itch"} <= set(rows)
    for name in ("attrs/pairs", "camus_compat/car"):
        done = CliRunner().invoke(cli_main, ["check", *rows[name]], catch_exceptions=False)
        assert done.exit_code == 0 and done.output.startswith("ok:"), (name, done.output)


def test_bench_report_refuses_a_directory_that_is_not_a_run_at_once(tmp_path) -> None:
    """Before Spark starts (which takes tens of seconds): a clear error, rc 1."""
    from camus.cli import main as cli_main
    from click.testing import CliRunner
    (tmp_path / "notes.txt").write_text("not a run\n")
    done = CliRunner().invoke(cli_main, ["bench", "report", str(tmp_path)])
    assert done.exit_code == 1 and "is not a benchmark run directory" in done.output, done.output
    assert "runs.jsonl" in done.output and "Traceback" not in done.output


def _serve_until_listening(exe: list[str], folder, *extra: str):     # type: ignore[no-untyped-def]
    """`controller serve` of `controller init`'s files on a free port, once it listens (a slow
    machine takes longer to start it: waited for, within two minutes)."""
    import socket
    import subprocess
    import time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = subprocess.Popen([*exe, "controller", "serve", "--topology", "topology.yaml", "--spec", "itch.p4",
                              "--tokens", "tokens.yaml", "--listen", f"127.0.0.1:{port}", *extra], cwd=folder,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return serve, port
        assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.stderr else ""
        time.sleep(0.1)


def test_controller_init_then_serve_and_subscribe_work_from_a_clean_directory(tmp_path) -> None:
    """Issue 46: the three commands of the README, in a fresh directory: the controller serves
    the written topology and tokens, a host subscribes with its token and sees its subscription,
    the switch gets its entries; tokens are private files."""
    import json
    import subprocess
    import sys
    import time
    exe = [sys.executable, "-c", "from camus.cli import main; main()"]
    first = tmp_path / "first"
    done = subprocess.run([*exe, "controller", "init", str(first)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "controller serve" in done.stdout, done.stderr
    assert (first / "tokens.yaml").stat().st_mode & 0o077 == 0
    again = subprocess.run([*exe, "controller", "init", str(first)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "--force" in again.stderr
    serve, port = _serve_until_listening(exe, first)
    try:
        token = (first / "h1.token").read_text().strip()
        url = f"127.0.0.1:{port}"
        sub = subprocess.run([*exe, "subscribe", "--controller", url, "--token", token, "--ttl", "600",
                              "stock == GOOGL and price > 50"], capture_output=True, text=True, timeout=120)
        assert sub.returncode == 0, sub.stderr
        sid = json.loads(sub.stdout)["id"]
        listed = subprocess.run([*exe, "subscriptions", "--controller", url, "--token", token],
                                capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0 and str(sid) in listed.stdout and "GOOGL" in listed.stdout, listed.stderr
        deadline = time.monotonic() + 120
        while not any((first / "switches" / "sw1").glob("*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any((first / "switches" / "sw1").glob("*")), "the switch got no program or entries"
    finally:
        serve.terminate()
        serve.wait(timeout=60)


def test_controller_init_tls_serves_https_with_an_audit_log(tmp_path) -> None:
    """Issue 48: `controller init --tls` makes the CA and certificates; the controller serves
    https with them; `subscribe --ca` works, without the CA it says what to give; every change
    leaves an audit line in --audit-log."""
    import json
    import subprocess
    import sys
    import time
    exe = [sys.executable, "-c", "from camus.cli import main; main()"]
    first = tmp_path / "first"
    done = subprocess.run([*exe, "controller", "init", str(first), "--tls"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "--tls-cert tls/controller.crt" in done.stdout, done.stderr
    assert all((first / "tls" / f"{p}.key").stat().st_mode & 0o077 == 0 for p in ("ca", "controller", "h1", "sw1"))
    bad = subprocess.run([*exe, "controller", "serve", "--topology", "topology.yaml", "--spec", "itch.p4", "--tokens",
                          "tokens.yaml", "--tls-cert", "tls/controller.crt", "--tls-key", "tls/h1.key"], cwd=first,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "tls/h1.key is not the private key of tls/controller.crt" in bad.stderr
    serve, port = _serve_until_listening(exe, first, "--tls-cert", "tls/controller.crt", "--tls-key",
                                         "tls/controller.key", "--tls-ca", "tls/ca.crt", "--audit-log", "audit.log")
    try:
        token = (first / "h1.token").read_text().strip()
        url = f"https://localhost:{port}"
        untrusted = subprocess.run([*exe, "subscribe", "--controller", url, "--token", token, "stock == GOOGL"],
                                   capture_output=True, text=True, timeout=120)
        assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr and "--ca" in untrusted.stderr
        sub = subprocess.run([*exe, "subscribe", "--controller", url, "--ca", str(first / "tls" / "ca.crt"),
                              "--token", token, "--ttl", "600", "stock == GOOGL and price > 50"],
                             capture_output=True, text=True, timeout=120)
        assert sub.returncode == 0, sub.stderr
        sid = json.loads(sub.stdout)["id"]
        deadline = time.monotonic() + 60
        while sid not in ((first / "audit.log").read_text() if (first / "audit.log").exists() else ""):
            assert time.monotonic() < deadline, "no audit line"
            time.sleep(0.1)
        assert "subscribe" in (first / "audit.log").read_text() and token not in (first / "audit.log").read_text()
    finally:
        serve.terminate()
        serve.wait(timeout=60)


def test_compile_json_summary_carries_the_resource_report(tmp_path) -> None:
    import json
    from camus.cli import main as cli_main
    from click.testing import CliRunner
    spec, rules = str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")
    done = CliRunner().invoke(cli_main, ["compile", spec, rules, "--json", "-o", str(tmp_path / "out")],
                              catch_exceptions=False)
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1 and doc["target"] == "ir" and doc["rules"] == 6 and doc["entries"] > 0
    assert doc["seconds"] >= 0 and "parse" in doc["timings_ms"]
    assert json.loads((tmp_path / "out" / "resources.json").read_text())["entries"] == doc["entries"]
    p4 = json.loads(CliRunner().invoke(cli_main, ["compile", spec, rules, "--target", "p4", "--json"],
                                       catch_exceptions=False).stdout)
    assert p4["target"] == "p4" and p4["arch"] == "v1model"


def test_one_shot_commands_run_without_the_cyclic_collector_and_give_it_back(monkeypatch) -> None:
    """`check`, `compile`, `update` ... read a rule set once and end: the collector walking
    their live objects again and again was 1.4 s of a 5.3 s update at 100K rules. It is off
    while they run and on again after (in-process callers keep theirs); other commands keep it."""
    import gc
    from camus import cli_compile as cli
    seen = []
    real = cli.compile_files

    def watched(*args, **kwargs):            # noqa: ANN002, ANN003, ANN202
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "compile_files", watched)
    try:
        res = CliRunner().invoke(main, ["check", str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")])
        assert res.exit_code == 0, res.output
        assert seen == [False] and gc.isenabled()
        assert CliRunner().invoke(main, ["apps"]).exit_code == 0 and gc.isenabled()
    finally:
        gc.unfreeze()                        # what the command froze goes back under the collector
        gc.enable()


def test_every_command_is_found_by_name_without_importing_the_others() -> None:
    """The group imports a command's module only when the command runs: its table must name
    every command of every module, and nothing else."""
    import importlib
    import subprocess
    import sys
    from camus.cli import COMMAND_MODULES
    found = {}
    for module in set(COMMAND_MODULES.values()):
        for command in importlib.import_module(f"camus.{module}").COMMANDS:
            found[command.name] = module
    assert found == COMMAND_MODULES
    done = subprocess.run([sys.executable, "-c", "import sys; from camus.cli import main; "
                           "sys.argv = ['camus-xdp', 'update', '--help']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('networkx', 'grpc')))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("[]"), done.stdout[-500:]
