"""The namespace lab (product code: the demo, the lab tests and the benchmark use it): a
publisher, a broker interface in this namespace, N subscribers, over network namespaces and veths.

    with Lab("camus-demo", subscribers=3) as lab:
        ...attach camus-xdp to lab.broker with lab.write_ports(path)...
        procs = {p: lab.capture(p, seconds=3) for p in lab.ports}
        lab.send(frames)
        got = {p: lab.collect(proc) for p, proc in procs.items()}

Subscriber i sits in namespace PREFIX-sI behind veth pair (PREFIX-sIb here, PREFIX-sI there).
The last subscriber is a remote endpoint (its copies are rewritten to its MAC/IP and read by a
UDP socket); the others receive frames as they are (read with a packet socket). Everything is
removed on exit, after Ctrl-C, and leftovers of an earlier run are removed on entry.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from camus.dataplane.installed import STATE_ROOT

FEED_PORT = 26400

CAPTURE_SCRIPT = """  # argv: raw|raw6 IFACE SECS | udp IP SECS PORT
# Captures for SECS at most; SIGTERM ends it sooner, once the interface has been quiet for 0.5 s
# (so a caller can stop it when its feed is sent instead of guessing how long the feed takes).
import json, signal, socket, sys, time
mode, arg, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
if mode in ("raw", "raw6"):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800 if mode == "raw" else 0x86DD))
    s.bind((arg, 0))
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((arg, int(sys.argv[4])))
s.settimeout(0.2)
got, end, stopping = [], time.time() + secs, []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
print("ready", flush=True)
while time.time() < end:
    try:
        got.append(s.recv(65535).hex())
    except socket.timeout:
        if stopping:
            s.settimeout(0.5)
            try:
                got.append(s.recv(65535).hex())
            except socket.timeout:
                break
print(json.dumps(got), flush=True)
"""

SENDER_SCRIPT = """  # argv: IFACE GAP_S; frames as hex on stdin
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
gap = float(sys.argv[2])
for h in sys.stdin.read().split():
    s.send(bytes.fromhex(h))
    if gap:
        time.sleep(gap)
"""

# An open-ended feed for tests that change the tables under traffic: it runs until told to stop
# (a line on stdin), not for a length guessed to outlast the change on some machine.
@contextmanager
def processes() -> Iterator[list[subprocess.Popen]]:
    """Processes a lab or benchmark starts (agents, controllers, switches): stopped on the way
    out, also when what ran in between failed (SIGTERM, then SIGKILL after 10 s)."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


def netns_popen(ns: str, *cmd: str, bpffs: bool = False, **kw) -> subprocess.Popen:
    """Start `cmd` in a lab namespace. With `bpffs`, only the network namespace is entered (as
    a container on the host shares its bpffs): `ip netns exec` mounts a fresh /sys, which hides
    the pinned maps an edge broker updates."""
    prefix = ["nsenter", f"--net=/run/netns/{ns}"] if bpffs else ["ip", "netns", "exec", ns]
    return subprocess.Popen([*prefix, *cmd], **kw)


def pass_through(iface: str, ns: str | None = None) -> Any:
    """A minimal XDP program (XDP_PASS) on a veth end, so the veth takes the XDP_TX frames its
    peer's XDP sends back (a veth delivers those only with NAPI on its end; a real NIC sends them
    out). Returns the BPF object (detach with `bpf.remove_xdp(iface.encode(), 0)`); with `ns`, a
    short process attaches it inside that namespace (the attachment outlives it, and goes with
    the interface) and None is returned."""
    if ns is not None:
        r = sh("ip", "netns", "exec", ns, sys.executable, "-c",
               f"from camus.lab.namespaces import pass_through; pass_through({iface!r})", check=False)
        if r.returncode:
            raise RuntimeError(f"pass-through XDP program on {iface} in {ns}: {r.stderr.strip()[-500:]}")
        return None
    from camus.dataplane.program import bcc_module
    bcc = bcc_module()
    bpf = bcc.BPF(text=b"int pass(struct xdp_md *ctx) { return XDP_PASS; }")
    bpf.attach_xdp(iface.encode(), bpf.load_func(b"pass", bcc.BPF.XDP), 0)
    return bpf


def _address(ipr, ifname: str, ip: str | None) -> None:   # type: ignore[no-untyped-def]
    """`ifname` up, with `ip`/24 when given (pyroute2: links and addresses by netlink)."""
    idx = ipr.link_lookup(ifname=ifname)[0]
    if ip is not None:
        ipr.addr("add", index=idx, address=ip, prefixlen=24)
    ipr.link("set", index=idx, state="up")


def _address_in(ns: str, ifname: str | None, ip: str | None, gateway: str | None = None) -> None:
    """The same inside namespace `ns`, and a default route via `gateway` when given."""
    from pyroute2 import NetNS
    with NetNS(ns) as n:
        if ifname is not None:
            _address(n, ifname, ip)
        if gateway is not None:
            n.route("add", dst="0.0.0.0/0", gateway=gateway)


IPV6 = Path("/proc/sys/net/ipv6")
LAB_OWNERS = STATE_ROOT / "labs"         # PREFIX -> the pid of the process whose lab it is


def run_lab_prefix(tag: str = "cb") -> str:
    """A lab prefix of this process alone: `tag` and the pid in hex, at most 8 characters (the
    interface names, PREFIX-s200b, stay within the kernel's 15). Two runs, or a run beside a
    test's or the demo's lab, then never remove each other's namespaces."""
    return f"{tag[:2]}{os.getpid():x}"


def free_net(first: int = 80) -> str:
    """A `10.X` net that no address in this namespace is in (a routed lab's broker side sits
    here, and two labs on one net would shadow each other's routes), from X = `first` on."""
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        used = {a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET)}
    taken = {int(a.split(".")[1]) for a in used if a and a.startswith("10.")}
    for x in range(first, 250):
        if x not in taken:
            return f"10.{x}"
    raise RuntimeError(f"no free 10.X net from 10.{first} on for a lab")


def remove_stale_labs() -> list[str]:
    """Remove the labs of processes that died without removing them (kill -9, a crash): their
    prefixes, from LAB_OWNERS, and the lock files such runs leave for units whose interface is
    gone. Returns the prefixes removed."""
    from camus.dataplane import installed as state
    gone = []
    for unit in state.stale_lock_units():
        state.remove_stale_lock(unit)
    for record in sorted(LAB_OWNERS.glob("*")) if LAB_OWNERS.exists() else []:
        try:
            pid = int(record.read_text().strip())
        except (OSError, ValueError):
            pid = 0
        if pid <= 0 or not Path(f"/proc/{pid}").exists():
            Lab(record.name).teardown()
            gone.append(record.name)
    return gone


class Lab:
    def __init__(self, prefix: str = "camus-demo", subscribers: int = 3, net: str = "10.79",
                 remote_endpoint: bool = True, routed: bool = False, ipv6: bool = True) -> None:
        if not 1 <= subscribers <= 200:
            raise ValueError("1..200 subscribers")
        self.prefix, self.n, self.net = prefix, subscribers, net
        self.remote_endpoint = remote_endpoint
        self.routed = routed          # addresses + routes so userspace brokers reach subscribers
        # ipv6=False: the kernel's own IPv6 chatter off (router solicitations and MLD reports a new
        # interface sends at random delays after it comes up), for a test that counts every frame.
        self.ipv6 = ipv6
        self.pub_ns = f"{prefix}-pub"
        self.broker = f"{prefix[:8]}-brk"          # interface names: at most 15 characters
        self.pub_if = f"{prefix[:8]}-pub"
        self.ports = list(range(1, subscribers + 1))

    # names -------------------------------------------------------------------------------
    def sub_ns(self, p: int) -> str:
        return f"{self.prefix}-s{p}"

    def sub_if(self, p: int, broker_side: bool) -> str:
        return f"{self.prefix[:8]}-s{p}{'b' if broker_side else ''}"

    def sub_ip(self, p: int) -> str:
        return f"{self.net}.{p}.2"

    @property
    def remote(self) -> int | None:
        return self.ports[-1] if self.remote_endpoint else None

    # lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Lab":
        from pyroute2 import IPRoute
        remove_stale_labs()
        self.teardown()
        LAB_OWNERS.mkdir(parents=True, exist_ok=True)
        (LAB_OWNERS / self.prefix).write_text(str(os.getpid()))
        try:
            with IPRoute() as ipr:
                self._namespace(self.pub_ns)
                ipr.link("add", ifname=self.broker, kind="veth", peer={"ifname": self.pub_if, "net_ns_fd": self.pub_ns})
                self._quiet(self.broker)
                _address(ipr, self.broker, f"{self.net}.0.2")
                _address_in(self.pub_ns, self.pub_if, f"{self.net}.0.1")
                for p in self.ports:
                    ns = self.sub_ns(p)
                    self._namespace(ns)
                    ipr.link("add", ifname=self.sub_if(p, True), kind="veth",
                             peer={"ifname": self.sub_if(p, False), "net_ns_fd": ns})
                    self._quiet(self.sub_if(p, True))
                    _address(ipr, self.sub_if(p, True), f"{self.net}.{p}.1" if self.routed else None)
                    _address_in(ns, self.sub_if(p, False), self.sub_ip(p), f"{self.net}.{p}.1" if self.routed else None)
                    # GRO on the subscriber side lets the veth take frames redirected from XDP.
                    sh("ip", "netns", "exec", ns, "ethtool", "-K", self.sub_if(p, False), "gro", "on", check=False)
                if self.routed:
                    _address_in(self.pub_ns, None, None, f"{self.net}.0.2")
        except BaseException:
            self.teardown()
            raise
        return self

    def _namespace(self, ns: str) -> None:
        from pyroute2 import netns
        netns.create(ns)
        if not self.ipv6 and IPV6.exists():   # before the veth's end moves in: later interfaces take `default`
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        _address_in(ns, "lo", None)                      # loopback up: local clients in the namespace

    def _quiet(self, ifname: str) -> None:
        """IPv6 off on a root-namespace end before it comes up (an IPv4-only lab, `ipv6=False`)."""
        if not self.ipv6 and IPV6.exists():            # (a kernel booted without IPv6 has none to quiet)
            (IPV6 / "conf" / ifname / "disable_ipv6").write_text("1")

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def teardown(self) -> None:
        """Remove this lab and any leftover of an earlier one with the same prefix (whatever its
        number of subscribers): namespaces named PREFIX-*, interfaces named PREFIX[:8]-*."""
        from pyroute2 import IPRoute, netns
        from camus.dataplane import runtime
        from camus.dataplane import installed as state
        if state.state_path(self.broker).exists():
            try:
                runtime.detach(self.broker)
            except Exception:
                pass
        with IPRoute() as ipr:
            for link in ipr.get_links():
                name = link.get_attr("IFLA_IFNAME") or ""
                if name.startswith(self.prefix[:8] + "-"):
                    try:
                        ipr.link("del", index=link["index"])
                    except Exception:
                        pass                              # its peer's removal took it already
        for name in netns.listnetns():
            if name.startswith(self.prefix + "-"):
                netns.remove(name)
        for unit in state.stale_lock_units():          # a killed run's lock files for our units
            if unit.startswith(self.prefix[:8] + "-"):
                state.remove_stale_lock(unit)
        (LAB_OWNERS / self.prefix).unlink(missing_ok=True)

    # use ---------------------------------------------------------------------------------
    def broker_mac(self) -> bytes:
        return bytes.fromhex(Path(f"/sys/class/net/{self.broker}/address").read_text().strip().replace(":", ""))

    def sub_mac(self, p: int) -> str:
        return sh("ip", "netns", "exec", self.sub_ns(p), "cat",
                  f"/sys/class/net/{self.sub_if(p, False)}/address").stdout.strip()

    def _endpoint(self, p: int, udp_port: int) -> str:
        return (f"{p}: {{iface: {self.sub_if(p, True)}, mac: '{self.sub_mac(p)}', ip: {self.sub_ip(p)}, "
                f"udp_port: {udp_port}}}")

    def write_ports(self, path: Path) -> Path:
        """Subscribers as interfaces, the last one (if `remote_endpoint`) as an endpoint."""
        lines = [f"{p}: {{iface: {self.sub_if(p, True)}}}" for p in self.ports if p != self.remote]
        if self.remote is not None:
            lines.append(self._endpoint(self.remote, FEED_PORT))
        path.write_text("\n".join(lines) + "\n")
        return path

    def write_endpoint_ports(self, path: Path, udp_port: int = FEED_PORT) -> Path:
        """Every subscriber as an endpoint: copies rewritten to its MAC, IP and `udp_port`."""
        path.write_text("\n".join(self._endpoint(p, udp_port) for p in self.ports) + "\n")
        return path

    def capture(self, port: int, seconds: float) -> subprocess.Popen:
        if port == self.remote:
            args = ["udp", self.sub_ip(port), str(seconds), str(FEED_PORT)]
        else:
            args = ["raw", self.sub_if(port, False), str(seconds)]
        proc = subprocess.Popen(["ip", "netns", "exec", self.sub_ns(port), sys.executable, "-c", CAPTURE_SCRIPT, *args],
                                stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":           # type: ignore[union-attr]
            raise RuntimeError(f"capture for subscriber {port} did not start")
        return proc

    def collect(self, proc: subprocess.Popen, port: int) -> list[bytes]:
        """Captured UDP payloads (frames are stripped to their payload; IPv4, no options)."""
        out, _ = proc.communicate(timeout=60)
        frames = [bytes.fromhex(h) for h in json.loads(out.strip().splitlines()[-1])]
        return frames if port == self.remote else [f[14 + 20 + 8:] for f in frames]

    def rx_packets(self, port: int) -> int:
        """Packets the subscriber's interface has received (kernel counter)."""
        out = sh("ip", "netns", "exec", self.sub_ns(port), "cat",
                 f"/sys/class/net/{self.sub_if(port, False)}/statistics/rx_packets").stdout
        return int(out.strip())

    def trafgen(self, frames: list[bytes], count: int) -> float:
        """Send `count` frames (cycling through `frames`) with trafgen on one CPU; seconds taken."""
        import tempfile
        import time
        cfg = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
        for f in frames:
            cfg.write("{ " + ", ".join(f"0x{b:02x}" for b in f) + " }\n")
        cfg.close()
        try:
            t0 = time.perf_counter()
            sh("ip", "netns", "exec", self.pub_ns, "trafgen", "-o", self.pub_if, "-c", cfg.name, "-n", str(count),
               "-P", "1", "-q")
            return time.perf_counter() - t0
        finally:
            Path(cfg.name).unlink(missing_ok=True)

    def send(self, frames: list[bytes], gap_s: float = 0.0) -> None:
        subprocess.run(["ip", "netns", "exec", self.pub_ns, sys.executable, "-c", SENDER_SCRIPT, self.pub_if, str(gap_s)],
                       input=" ".join(f.hex() for f in frames), text=True, check=True)


def mold_order_refs(payload: bytes) -> list[int]:
    """Order reference numbers of the ITCH Add Order messages in a MoldUDP64 payload. The
    count and lengths must describe the payload exactly (what pruning has to get right)."""
    count = int.from_bytes(payload[18:20], "big")
    pos, refs = 20, []
    for _ in range(count):
        n = int.from_bytes(payload[pos:pos + 2], "big")
        refs.append(int.from_bytes(payload[pos + 2 + 11:pos + 2 + 19], "big"))
        pos += 2 + n
    if pos != len(payload):
        raise ValueError(f"MoldUDP64 count and lengths cover {pos} bytes of a {len(payload)}-byte payload")
    return refs
