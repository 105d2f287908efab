"""`camus-xdp controller serve` and `agent`; the subscribers' commands are cli_subscribe.py."""
from __future__ import annotations

import sys

import click

from camus.controller.routing import POLICIES


# one line per request on stderr: off by default (a thousand subscription changes a second
# would be a thousand lines a second, and formatting them costs the event loop)
ACCESS_LOG = click.option("--access-log", is_flag=True, help="Log every HTTP request on stderr.")
LOG_LEVEL = click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                         show_default=True, help="What the service logs on stderr.")


def _logging(level: str) -> None:
    import logging
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")


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
def init(directory: str, force: bool) -> None:
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
    click.echo(f"wrote {', '.join(str(out / n) for n in names)}\n\nnext:\n"
               f"  cd {out}\n"
               "  camus-xdp controller serve --topology topology.yaml --spec itch.p4 --tokens tokens.yaml &\n"
               "  camus-xdp subscribe --token \"$(cat h1.token)\" 'stock == GOOGL and price > 50'\n"
               "  camus-xdp subscriptions --token \"$(cat h1.token)\"\n"
               "(the switch's program and entries appear under switches/sw1/)")


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
              help="SQLite file keeping subscriptions across restarts (ids are never reused).")
@click.option("--switch-dir", type=click.Path(file_okay=False), default="switches", show_default=True,
              help="Where each P4 switch without a `p4runtime: HOST:PORT` in the topology gets its "
                   "program and entries written (DIR/<switch>/); the others are driven over P4Runtime.")
@click.option("--default-ttl", type=click.FloatRange(0.1), default=30.0, show_default=True)
@ACCESS_LOG
@LOG_LEVEL
def serve(topology_path, spec, policy, alpha, listen, tokens_path, agent_token_file, db_path, switch_dir,
          default_ttl, access_log, log_level) -> None:
    """Serve the subscription API; push tables to host agents and to switches.

    \b
    A switch with `p4runtime: HOST:PORT` (and `device_id: N`, default 1) in the topology is
    driven over P4Runtime: the controller becomes its primary client, reads the P4Info it
    runs, and writes each change as a make-before-break delta; a switch that restarts is
    re-synchronised (read back, diff, write). Other switches get directories (--switch-dir).
    """
    from pathlib import Path
    from aiohttp import web
    from camus.compiler.compile import CompileOptions
    from camus.compiler.language.errors import CompileErrors
    from camus.compiler.language.spec_parser import load_spec
    from camus.controller.core import Controller
    from camus.controller.service import make_app
    from camus.controller.tokens import load_tokens
    from camus.controller.targets import AgentTarget, P4RuntimeTarget, SwitchDirTarget
    from camus.controller.topology import Topology, TopologyError
    _logging(log_level)
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
    targets = {}
    for d in topo.devices:
        if topo.kind(d) == "xdp" and topo.attr(d, "agent"):
            targets[d] = AgentTarget(topo.attr(d, "agent"), topo.attr(d, "token", agent_token) or "")
        elif topo.kind(d) == "p4" and topo.attr(d, "p4runtime"):
            try:
                device_id = int(topo.attr(d, "device_id", "1") or 1)
            except ValueError:
                click.echo(f"error: {topology_path}: {d}: device_id must be a number", err=True)
                sys.exit(1)
            targets[d] = P4RuntimeTarget(topo.attr(d, "p4runtime") or "", device_id,
                                         topo.attr(d, "arch", "v1model") or "v1model",
                                         pipeline_config=Path(spec).read_bytes())
        elif topo.kind(d) == "p4":
            targets[d] = SwitchDirTarget(Path(switch_dir), topo.attr(d, "arch", "v1model") or "v1model")
    from camus.controller.store import SubscriptionStore
    ctl = Controller(topo, sp, policy, CompileOptions(alpha=alpha), targets, store=SubscriptionStore(db_path),
                     restart_hold_s=default_ttl, deferred=True)
    host, port = _listen(listen)
    click.echo(f"controller: {len(topo.devices)} devices, {len(topo.hosts)} hosts, policy {policy}; "
               f"http://{host}:{port}/v1/", err=True)
    web.run_app(make_app(ctl, tokens, default_ttl, compile_process=True), host=host, port=port, print=None,
                access_log=web.access_logger if access_log else None)


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
@ACCESS_LOG
@LOG_LEVEL
def agent(iface, spec, ports_path, listen, token_file, mode, access_log, log_level) -> None:
    """Host agent: apply the controller's tables to IFACE atomically (root)."""
    from aiohttp import web
    _logging(log_level)
    from camus.controller.agent import Agent, make_agent_app
    host, port = _listen(listen)
    token = _secret(token_file, "CAMUS_AGENT_TOKEN")
    if not token:
        click.echo("error: give the agent token with --token-file or $CAMUS_AGENT_TOKEN", err=True)
        sys.exit(2)
    a = Agent(iface, spec, token, ports_path, mode)
    click.echo(f"agent for {iface} on http://{host}:{port}/v1/", err=True)
    web.run_app(make_agent_app(a), host=host, port=port, print=None,
                access_log=web.access_logger if access_log else None)


COMMANDS: list[click.Command] = [controller, agent]
