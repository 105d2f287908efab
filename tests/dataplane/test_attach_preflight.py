"""An interface that cannot take camus-xdp is refused before anything is compiled or built
(issue 46: with another XDP program attached, attach built for 12 s and then failed with a raw
`Device or resource busy` and the wrong advice)."""
from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from camus.cli import main
from camus.dataplane.installed import pin_dir, state_path
from tests.conftest import APPS

pytestmark = pytest.mark.bpf
SPEC, RULES = str(APPS / "itch" / "itch.p4"), str(APPS / "itch" / "rules.txt")


@pytest.fixture
def busy_veth():
    """A veth whose end carries someone else's XDP program (native)."""
    from bcc import BPF
    a, b = "cxpf-a", "cxpf-b"
    subprocess.run(["ip", "link", "del", a], capture_output=True)
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    subprocess.run(["ip", "link", "set", a, "up"], check=True)
    subprocess.run(["ip", "link", "set", b, "up"], check=True)
    other = BPF(text=b"int someone_else(struct xdp_md *ctx) { return XDP_PASS; }")
    fn = other.load_func(b"someone_else", BPF.XDP)
    BPF.attach_xdp(a.encode(), fn, 2)                     # XDP_FLAGS_DRV_MODE
    try:
        yield a
    finally:
        BPF.remove_xdp(a.encode(), 2)
        subprocess.run(["ip", "link", "del", a], capture_output=True)


def test_a_foreign_xdp_program_is_refused_before_anything_is_built(busy_veth: str, monkeypatch) -> None:
    import camus.cli_attach as cli_attach
    from camus.dataplane.program import XdpProgram

    def never(*_a, **_k):
        raise AssertionError("compiled or built for a busy interface")
    monkeypatch.setattr(cli_attach, "compile_for", never)
    monkeypatch.setattr(XdpProgram, "load", classmethod(never))
    for args in (["attach", busy_veth, "--spec", SPEC, "--rules", RULES, "--mode", "native"],
                 ["attach", busy_veth, "--spec", SPEC, "--rules", RULES, "--mode", "generic"],
                 ["attach", busy_veth, "--app", f"a={SPEC},{RULES}", "--app", f"b={SPEC},{RULES}"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, (args, r.output, r.exception)
        assert "already runs an XDP program: someone_else (id " in r.output, r.output
        assert "xdp off" in r.output and "another interface" in r.output
    assert not state_path(busy_veth).exists() and not pin_dir(busy_veth).exists()
    r = CliRunner().invoke(main, ["attach", "no-such-if0", "--spec", SPEC, "--rules", RULES, "--mode", "native"])
    assert r.exit_code == 1 and "no such interface: no-such-if0" in r.output


def test_a_driver_without_native_xdp_is_refused_before_anything_is_built(monkeypatch) -> None:
    """The kernel says which drivers run XDP themselves (netdev xdp-features): a bridge does not,
    so native attach is refused at once with the way out (generic mode)."""
    import camus.cli_attach as cli_attach
    from camus.dataplane.netlink import native_xdp
    from camus.dataplane.program import XdpProgram
    dummy = "cxpf-br"
    subprocess.run(["ip", "link", "del", dummy], capture_output=True)
    subprocess.run(["ip", "link", "add", dummy, "type", "bridge"], check=True)
    try:
        assert native_xdp(dummy) is False and native_xdp("lo") is False
        with monkeypatch.context() as m:
            def never(*_a, **_k):
                raise AssertionError("compiled or built for a driver without native XDP")
            m.setattr(cli_attach, "compile_for", never)
            m.setattr(XdpProgram, "load", classmethod(never))
            r = CliRunner().invoke(main, ["attach", dummy, "--spec", SPEC, "--rules", RULES, "--mode", "native"])
        assert r.exit_code == 1 and "has no native XDP" in r.output and "--mode generic" in r.output, r.output
        assert not state_path(dummy).exists() and not pin_dir(dummy).exists()
    finally:
        subprocess.run(["ip", "link", "del", dummy], capture_output=True)


def test_veth_runs_xdp_natively_as_the_kernel_reports() -> None:
    from camus.dataplane.netlink import native_xdp
    a = "cxpf-v"
    subprocess.run(["ip", "link", "del", a], capture_output=True)
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", "cxpf-w"], check=True)
    try:
        assert native_xdp(a) is True
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
