"""`camus-xdp controller serve` and `agent`; the subscribers' commands are cli_subscribe.py."""
from __future__ import annotations

import json
import sys

import click

from camus.event_loop import new_event_loop
from camus.controller.routing import POLICIES
from camus.cli_subscribe import api_client, with_common


# one line per request on stderr: off by default (a thousand subscription changes a second
# would be a thousand lines a second, and formatting them costs the event loop)
ACCESS_LOG = click.option("--access-log", is_flag=True, help="Log every HTTP request on stderr.")
LOG_LEVEL = click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                         show_default=True, help="What the service logs on stderr.")


def _logging(level: str) -> None:
    import logging
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _without_password(url: str) -> str:
    """A database URL fit for an error message (its password, if any, left out)."""
    import re
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", url)


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("HOST:PORT, e.g. 127.0.0.1:9000")
    return host, int(port)


def _secret(path: str | None, env: str) -> str:
    """A secret from a file (first line) or the environment: never from argv, which ps shows."""
    import os
    if path:
        with open(path) as f:
            return f.readline().strip()
    return os.environ.get(env, "").strip()


@click.group()
def controller() -> None:
    """The controller: routes subscriptions over a topology of XDP hosts and P4 switches."""


INIT_TOPOLOGY = """\
# A first topology (camus-xdp controller init): one P4 switch at the edge with two hosts.
# Devices: kind p4 | xdp | plain | host; a switch's `layer:` (edge, aggregation, core, ...) is
# what policies mr/tr route by. A P4 switch without `p4runtime: HOST:PORT` gets its program and
# entries written under --switch-dir; an xdp device names its host agent (`agent: URL`).
name: first
devices:
  - {name: sw1, kind: p4, layer: edge}
  - {name: h1, kind: host}
  - {name: h2, kind: host}
links:
  - {a: sw1, a_port: 1, b: h1, b_port: 1}
  - {a: sw1, a_port: 2, b: h2, b_port: 1}
"""


@controller.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Overwrite the files if DIRECTORY already has them.")
@click.option("--tls", "with_tls", is_flag=True,
              help="Also make a private CA and certificates (DIRECTORY/tls/): the controller, each host's agent and "
                   "the switch, named after themselves and valid for localhost and 127.0.0.1 (--tls-name adds more).")
@click.option("--tls-name", multiple=True, metavar="NAME_OR_IP",
              help="Another name or IP address every certificate is valid for (where the parties reach each "
                   "other); repeatable.")
def init(directory: str, force: bool, with_tls: bool, tls_name: tuple[str, ...]) -> None:
    """Write a working first setup into DIRECTORY: topology.yaml (one switch, two hosts),
    tokens.yaml (a fresh random token per host, readable by you alone), h1.token and h2.token
    (each host's token alone, for --token-file), the shipped ITCH spec, and the commands to run.

    \b
      camus-xdp controller init first && cd first
      camus-xdp controller serve --topology topology.yaml --spec itch.p4 --tokens tokens.yaml &
      camus-xdp subscribe --token "$(cat h1.token)" 'stock == GOOGL and price > 50'
    """
    import os
    import secrets
    import shutil
    from pathlib import Path
    from camus.data import apps_dir
    out = Path(directory)
    names = ("topology.yaml", "tokens.yaml", "h1.token", "h2.token", "itch.p4")
    existing = [n for n in names if (out / n).exists()]
    if existing and not force:
        click.echo(f"error: {out} already has {', '.join(existing)} (--force overwrites them)", err=True)
        sys.exit(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "topology.yaml").write_text(INIT_TOPOLOGY)
    shutil.copyfile(apps_dir() / "itch" / "itch.p4", out / "itch.p4")
    tokens = {host: secrets.token_urlsafe(24) for host in ("h1", "h2")}

    def private(path: Path, text: str) -> None:     # secrets: created 0600, never world-readable
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
    private(out / "tokens.yaml", "# token: host it may subscribe for (keep this file private)\n"
            + "".join(f"{tok}: {host}\n" for host, tok in tokens.items()))
    for host, tok in tokens.items():
        private(out / f"{host}.token", tok + "\n")
    tls_said = ""
    if with_tls:
        from camus.controller.tls import make_pki
        valid_for = ["localhost", "127.0.0.1", *tls_name]
        make_pki(out / "tls", {party: valid_for for party in ("controller", "h1", "h2", "sw1")})
        tls_said = ("\nTLS (tls/: ca.crt, and a certificate + key each for controller, h1, h2, sw1; keys 0600):\n"
                    "  camus-xdp controller serve ... --tls-cert tls/controller.crt --tls-key tls/controller.key "
                    "--tls-ca tls/ca.crt &\n"
                    "  camus-xdp subscribe --controller https://localhost:9000 --ca tls/ca.crt --token ... 'FILTER'\n"
                    "  agents: camus-xdp agent IFACE ... --tls-cert tls/h1.crt --tls-key tls/h1.key --tls-ca tls/ca.crt\n"
                    "  switches: P4Runtime over TLS with tls/sw1.crt and tls/sw1.key (client CA: tls/ca.crt)\n")
    click.echo(f"wrote {', '.join(str(out / n) for n in names)}\n\nnext:\n"
               f"  cd {out}\n"
               "  camus-xdp controller serve --topology topology.yaml --spec itch.p4 --tokens tokens.yaml &\n"
               "  camus-xdp subscribe --token \"$(cat h1.token)\" 'stock == GOOGL and price > 50'\n"
               "  camus-xdp subscriptions --token \"$(cat h1.token)\"\n"
               "(the switch's program and entries appear under switches/sw1/)" + tls_said)


@controller.command("verify")
@click.argument("device")
@click.option("--json", "as_json", is_flag=True, help="The controller's answer as one JSON object.")
@with_common
def verify_device(device: str, as_json: bool, url: str, token: str, ca: str | None, cert: str | None,
                  key: str | None) -> None:
    """Ask the controller to prove that switch DEVICE gives what it placed there.

    \b
    The controller reads the switch back the way it reaches it for pushes (P4Runtime as a
    reader, or its switch directory) and decides over every message that its tables give the
    device's current rules (a fitted cover: never fewer ports than the rules), or names one
    message where they differ. An XDP host is checked on the host: `sudo camus-xdp verify IFACE`.

    \b
    Exit status: 0 equal (or a cover that never under-delivers), 1 they differ, 2 not decided
    (a push pending, not a switch, the switch unreachable: the reason is printed).

    \b
    Example:
        camus-xdp controller verify leaf1 --controller https://ctl:9000 --token $TOKEN --ca ca.crt
    """
    from camus.controller.client import ConnectionFailure, ServiceError
    client = api_client(url, token, ca, cert, key)
    try:
        out = client.verify(device)
    except ServiceError as exc:
        click.echo(f"cannot verify {device}: {exc.args[0] if exc.args else exc}", err=True)
        sys.exit(2)
    except (ConnectionFailure, OSError) as exc:
        click.echo(f"cannot reach the controller: {exc}", err=True)
        sys.exit(2)
    verdict = out.get("verdict")
    if as_json:
        click.echo(json.dumps(out))
    elif verdict == "differs":
        click.echo(f"DIFFERS: {device} does not give its {out.get('rules', 0):,} rules", err=False)
        if "reason" in out:
            click.echo(f"  {out['reason']}")
        cx = out.get("counterexample")
        if cx:
            click.echo(f"  message: {' '.join(f'{k}={v}' for k, v in cx['message'].items())}\n"
                       f"  rules give:  {cx['rules']}\n  switch gives: {cx['tables']}\n  path:")
            for step in cx["path"]:
                click.echo(f"    {step}")
    elif verdict in ("equal", "covers"):
        what = "equal to its rules" if verdict == "equal" else \
            f"a cover of its rules (never fewer ports; at most {out.get('max_ports')} ports a message)"
        click.echo(f"{device}: {what}, for every message ({out.get('rules', 0):,} rules, {out.get('regions', 0):,} "
                   f"regions, {out.get('seconds')} s)")
    else:
        click.echo(f"cannot decide: {out.get('reason')}", err=True)
    sys.exit({"equal": 0, "covers": 0, "differs": 1}.get(verdict, 2))  # type: ignore[arg-type]


@controller.command("serve")
@click.option("--topology", "topology_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Topology file (YAML/JSON): devices with kind p4|xdp|plain|host, links with ports; "
                   "xdp devices carry `agent: URL`, p4 devices `p4runtime: HOST:PORT` (and "
                   "`device_id: N`) or get a --switch-dir directory.")
@click.option("--spec", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--policy", type=click.Choice(list(POLICIES)), default="mr", show_default=True,
              help="mr/tr: hierarchical (Algorithm 1); mst/mst++: spanning tree of a general graph.")
@click.option("--alpha", type=click.IntRange(1), default=1, show_default=True)
@click.option("--listen", default="127.0.0.1:9000", show_default=True, help="HOST:PORT of the HTTP API.")
@click.option("--tokens", "tokens_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML 'token: host' lines: who may subscribe for which host.")
@click.option("--agent-token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              envvar="CAMUS_AGENT_TOKEN_FILE",
              help="File holding the token the controller presents to host agents (not on the command "
                   "line: it would show in ps). $CAMUS_AGENT_TOKEN also works.")
@click.option("--db", "db_path", default="camus-controller.db", show_default=True,
              help="Where subscriptions are kept across restarts (ids are never reused): a SQLite file (one "
                   "controller process), or postgresql://USER@HOST:PORT/DB, shared by any number of controller "
                   "processes: each answers the API; one at a time owns the devices (a lease in the database).")
@click.option("--lease-seconds", type=click.FloatRange(2.0, 600.0), default=5.0, show_default=True,
              help="With a postgresql:// --db: how long after its owner's last renewal (every second) the devices "
                   "pass to another controller process.")
@click.option("--switch-dir", type=click.Path(file_okay=False), default="switches", show_default=True,
              help="Where each P4 switch without a `p4runtime: HOST:PORT` in the topology gets its "
                   "program and entries written (DIR/<switch>/); the others are driven over P4Runtime.")
@click.option("--default-ttl", type=click.FloatRange(0.1), default=30.0, show_default=True)
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve the API over TLS (https) with this certificate (PEM, with --tls-key); the controller "
                   "also shows it to agents and switches (mutual TLS).")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="The certificate's private key.")
@click.option("--tls-ca", type=click.Path(dir_okay=False), default=None,
              help="The CA that signed the agents' and switches' certificates (https:// agents, P4Runtime over "
                   "TLS); with --tls-client-auth, the API clients' too.")
@click.option("--tls-client-auth", is_flag=True,
              help="Serve only API clients that show a certificate --tls-ca signed (besides their token).")
@click.option("--audit-log", type=click.Path(dir_okay=False), default=None,
              help="Append the audit lines (every subscribe, unsubscribe and TTL change: host, token fingerprint, "
                   "peer, filter) to this file; default: stderr with the rest of the log.")
@click.option("--push-interval", type=click.FloatRange(0.0, 10.0), default=0.02, show_default=True,
              help="Seconds from one push to a device to its next: changes that arrive meanwhile are pushed "
                   "together. A change after a quiet spell is pushed at once; under churn each push costs the "
                   "device a fixed part (its root table is rewritten), so batching saves its CPU for a few "
                   "milliseconds of delay. 0: push as soon as the last push is answered.")
@click.option("--verify-pushes", is_flag=True,
              help="Prove each P4Runtime push's tables against the device's rules before writing them "
                   "(camus-xdp verify's checker): a push whose tables differ is refused, nothing written, and "
                   "/v1/status says on which message. Costs the check per push: milliseconds at hundreds of "
                   "rules, ~17 s at 100K.")
@ACCESS_LOG
@LOG_LEVEL
def serve(topology_path, spec, policy, alpha, listen, tokens_path, agent_token_file, db_path, switch_dir,
          default_ttl, tls_cert, tls_key, tls_ca, tls_client_auth, audit_log, push_interval, verify_pushes,
          lease_seconds, access_log, log_level) -> None:
    """Serve the subscription API; push tables to host agents and to switches.

    \b
    A switch with `p4runtime: HOST:PORT` (and `device_id: N`, default 1) in the topology is
    driven over P4Runtime: the controller becomes its primary client, reads the P4Info it
    runs, and writes each change as a make-before-break delta; a switch that restarts is
    re-synchronised (read back, diff, write). Other switches get directories (--switch-dir).

    \b
    TLS everywhere (camus-xdp controller init DIR --tls writes a private CA and certificates):
      --tls-cert controller.crt --tls-key controller.key --tls-ca ca.crt
    serves https://, reaches agents given as `agent: https://...` and P4Runtime switches over
    TLS, showing the controller's certificate to both. A device with `tls: false` in the
    topology is reached in clear; `tls_name: NAME` is the name a switch's certificate carries
    when its address is not that name. The tokens file is re-read when it changes.
    """
    from pathlib import Path
    from aiohttp import web
    from camus.compiler.compile import CompileOptions
    from camus.controller import http_limits
    from camus.compiler.language.errors import CompileErrors
    from camus.compiler.language.spec_parser import load_spec
    from camus.controller.core import Controller
    from camus.controller.service import make_app
    from camus.controller.tokens import load_tokens
    from camus.controller.targets import AgentTarget, P4RuntimeTarget, PushError, SwitchDirTarget
    from camus.controller.topology import Topology, TopologyError
    from camus.controller.tls import TlsError, TlsFiles, server_context
    _logging(log_level)
    if audit_log:
        import logging
        handler = logging.FileHandler(audit_log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logging.getLogger("camus.audit").setLevel(logging.INFO)      # whatever --log-level says
        logging.getLogger("camus.audit").addHandler(handler)
        logging.getLogger("camus.audit").propagate = False
    try:
        tls = TlsFiles(tls_cert, tls_key, tls_ca)
        ssl_context = server_context(tls, tls_client_auth) if tls_cert else None
        if tls_client_auth and not tls_cert:
            raise TlsError("--tls-client-auth needs the controller's own certificate (--tls-cert, --tls-key)")
    except TlsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    try:
        topo = Topology.load(topology_path)
        tokens = load_tokens(tokens_path)
        sp = load_spec(spec)
    except (TopologyError, ValueError, CompileErrors) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if policy in ("mr", "tr"):          # Algorithm 1 ranks devices by layer: say so before serving
        from camus.controller.routing import LAYER_RANK
        unlayered = [d for d in topo.devices if topo.layer(d) not in LAYER_RANK]
        if unlayered:
            click.echo(f"error: {topology_path}: policy {policy} routes by layers (the Camus paper's Algorithm 1); "
                       f"give every switch `layer: edge|leaf|aggregation|spine|core` ({', '.join(unlayered)} "
                       "has none or another), or serve a general graph with --policy mst or mst++", err=True)
            sys.exit(1)
    agent_token = _secret(agent_token_file, "CAMUS_AGENT_TOKEN")

    def make_targets(election_id: int) -> dict:
        """Each device's push target (P4Runtime switches elect with `election_id`)."""
        targets: dict = {}
        for d in topo.devices:
            device_tls = tls if tls.enabled and str(topo.attr(d, "tls", "true")).lower() not in ("false", "no", "off") else None
            if topo.kind(d) == "xdp" and topo.attr(d, "agent"):
                try:
                    targets[d] = AgentTarget(topo.attr(d, "agent"), topo.attr(d, "token", agent_token) or "",
                                             tls=device_tls)
                except PushError as exc:
                    click.echo(f"error: {topology_path}: {d}: {exc} (or `tls: false` for this device)", err=True)
                    sys.exit(1)
            elif topo.kind(d) == "p4" and topo.attr(d, "p4runtime"):
                try:
                    device_id = int(topo.attr(d, "device_id", "1") or 1)
                except ValueError:
                    click.echo(f"error: {topology_path}: {d}: device_id must be a number", err=True)
                    sys.exit(1)
                targets[d] = P4RuntimeTarget(topo.attr(d, "p4runtime") or "", device_id,
                                             topo.attr(d, "arch", "v1model") or "v1model",
                                             pipeline_config=Path(spec).read_bytes(), tls=device_tls,
                                             tls_name=topo.attr(d, "tls_name"), verify_pushes=verify_pushes)
            elif topo.kind(d) == "p4":
                targets[d] = SwitchDirTarget(Path(switch_dir), topo.attr(d, "arch", "v1model") or "v1model")
        return targets

    targets = make_targets(1)                       # (checks the topology's devices before serving)
    shared = None
    if db_path.startswith(("postgresql://", "postgres://")):
        from camus.controller.shared_front import SharedFront
        from camus.controller.shared_store import SharedStore
        from camus.controller.store import StoreError

        def build(snapshot, epoch: int) -> Controller:
            return Controller(topo, sp, policy, CompileOptions(alpha=alpha), make_targets(max(1, epoch)),
                              loaded=snapshot, deferred=True, push_interval=push_interval)
        try:
            shared = SharedFront(SharedStore(db_path), topo, sp, CompileOptions(alpha=alpha), build,
                                 f"{'https' if ssl_context else 'http'}://{listen}", lease_s=lease_seconds)
        except StoreError as exc:
            click.echo(f"error: --db {_without_password(db_path)}: {exc}", err=True)
            sys.exit(1)
        ctl = None
    else:
        from camus.controller.store import SubscriptionStore
        ctl = Controller(topo, sp, policy, CompileOptions(alpha=alpha), targets, store=SubscriptionStore(db_path),
                         restart_hold_s=default_ttl, deferred=True, push_interval=push_interval)
    host, port = _listen(listen)
    click.echo(f"controller: {len(topo.devices)} devices, {len(topo.hosts)} hosts, policy {policy}; "
               f"{'https' if ssl_context else 'http'}://{host}:{port}/v1/"
               + (" (client certificates required)" if tls_client_auth else ""), err=True)
    web.run_app(make_app(ctl, tokens, default_ttl, compile_process=True, shared=shared), host=host, port=port, print=None,
                access_log=web.access_logger if access_log else None, ssl_context=ssl_context,
                reuse_port=shared is not None,        # processes on one store may share one address
                loop=new_event_loop(), **http_limits.server_options())


@click.command()
@click.argument("iface")
@click.option("--spec", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--ports", "ports_path", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--listen", default="127.0.0.1:9100", show_default=True)
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              envvar="CAMUS_AGENT_TOKEN_FILE",
              help="File holding the bearer token the controller must present ($CAMUS_AGENT_TOKEN also "
                   "works; never on the command line, where ps shows it).")
@click.option("--mode", type=click.Choice(["native", "generic"]), default="native", show_default=True)
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help="Serve over TLS (https) with this certificate (PEM, with --tls-key).")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="The certificate's private key.")
@click.option("--tls-ca", type=click.Path(dir_okay=False), default=None,
              help="Mutual TLS: take tables only from a client whose certificate this CA signed and that "
                   "names the controller (--controller-name).")
@click.option("--controller-name", default="controller", show_default=True,
              help="With --tls-ca: the name the controller's certificate must carry (common or DNS name).")
@ACCESS_LOG
@LOG_LEVEL
def agent(iface, spec, ports_path, listen, token_file, mode, tls_cert, tls_key, tls_ca, controller_name, access_log,
          log_level) -> None:
    """Host agent: apply the controller's tables to IFACE atomically (root).

    \b
    Over TLS, taking tables only from the controller's certificate:
      camus-xdp agent eth0 --spec itch.p4 --token-file agent.token --listen 10.0.0.5:9100 \\
          --tls-cert h1.crt --tls-key h1.key --tls-ca ca.crt
    """
    from aiohttp import web
    _logging(log_level)
    from camus.controller import http_limits
    from camus.controller.agent import Agent, local_socket, make_agent_app
    from camus.controller.tls import TlsError, TlsFiles, server_context
    host, port = _listen(listen)
    token = _secret(token_file, "CAMUS_AGENT_TOKEN")
    if not token:
        click.echo("error: give the agent token with --token-file or $CAMUS_AGENT_TOKEN", err=True)
        sys.exit(2)
    try:
        if tls_ca and not tls_cert:
            raise TlsError("--tls-ca checks the controller's certificate over TLS: give the agent's own "
                           "certificate too (--tls-cert, --tls-key)")
        tls = TlsFiles(tls_cert, tls_key, tls_ca)
        ssl_context = server_context(tls, require_client=bool(tls_ca)) if tls_cert else None
    except TlsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    a = Agent(iface, spec, token, ports_path, mode)
    from camus.dataplane.program import DataplaneError
    try:
        a.hold_interface()                  # a second agent on IFACE stops here, naming the first
    except (DataplaneError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"agent for {iface} on {'https' if ssl_context else 'http'}://{host}:{port}/v1/"
               + (f" (tables only from {controller_name!r}'s certificate)" if tls_ca else "")
               + f"; `camus-xdp update {iface}` on this host hands it the rules file", err=True)
    web.run_app(make_agent_app(a, frozenset({controller_name}) if tls_ca else frozenset(), local=local_socket(iface)),
                host=host, port=port,
                print=None, access_log=web.access_logger if access_log else None, ssl_context=ssl_context,
                loop=new_event_loop(), **http_limits.server_options())


COMMANDS: list[click.Command] = [controller, agent]
