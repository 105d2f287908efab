"""P4 back end: ILA's identifier-locator rewrite on a v1model switch (apps/ila).

A leaf whose custom action is `ila(L::)` is a `t_leaf_calls` entry `ila_rewrite(call_id,
locator)` (p4_schema), which leaves the locator in `meta.camus_ila`; after the tables the ingress
writes it into the IPv6 destination's top 64 bits and adjusts the UDP checksum for the changed
words (RFC 1624), exactly as bpf/camus_ila.h does: an unchanged address is left alone, a zero
checksum ("none") too, a result of 0 written as 0xffff. Then the packet goes on: to its ports
when the rules give it some, else routed by its new address through `ipv6_lpm` — the switch's
counterpart of the host stack that routes it after XDP (a rule with ports and ila() sends the
rewritten packet to its ports only, where XDP also hands it to the stack).

`rewrite_walk` is that rewrite in Python: the tests compare its bytes with the XDP program's own
rewrite in the kernel (no p4c or bmv2 runs on the build machines).
"""
from __future__ import annotations

from ...language.spec import Role, Spec
from ..emit import Emitter
from .layout import Layout, field_slice

META = "camus_ila"


def ila_rewrites(spec: Spec) -> bool:
    """Can the switch run ila()? An IPv6 feed, one message per packet (bpf/camus_ila.h's terms)."""
    return any(spec.instances[n].role is Role.IPV6 for n in spec.stack) and spec.framing.kind == "none"


def metadata_type() -> str:
    e = Emitter()
    with e.block(f"struct {META}_t"):
        e("bit<1> set;         // ila(): a locator to write (t_leaf_calls' ila_rewrite)")
        e("bit<64> locator;    // the IPv6 destination's new top 64 bits")
    return e.text().rstrip("\n")


def rewrite_action(e: Emitter) -> None:
    """t_leaf_calls' action for a leaf that rewrites: its call id and the locator."""
    with e.block("action ila_rewrite(bit<16> call_id, bit<64> locator)"):
        e("meta.camus.call_id = call_id;")
        e(f"meta.{META}.set = 1;")
        e(f"meta.{META}.locator = locator;")
    e()


def ingress_tail(lay: Layout) -> str:
    dst = field_slice(lay.ip, 192, 64, "IPv6 destination's top 64 bits")
    csum = field_slice(lay.udp, 48, 16, "UDP checksum")
    e = Emitter()
    e.depth = 2
    e("// ILA: the locator into the destination, the UDP checksum adjusted (bpf/camus_ila.h)")
    with e.block(f"if (meta.{META}.set == 1 && hdr.{lay.udp.name}.isValid())"):
        e(f"bit<64> old_loc = {dst};")
        e(f"bit<64> new_loc = meta.{META}.locator;")
        e(f"{dst} = new_loc;")
        with e.block(f"if ({csum} != 0 && old_loc != new_loc)"):
            e("// RFC 1624: ~(~C + ~m + m') over the four 16-bit words that changed")
            terms = [f"(bit<32>)(~{csum})"]
            terms += [f"(bit<32>)(~old_loc[{63 - 16 * i}:{48 - 16 * i}])" for i in range(4)]
            terms += [f"(bit<32>)new_loc[{63 - 16 * i}:{48 - 16 * i}]" for i in range(4)]
            e(f"bit<32> sum = {' + '.join(terms)};")
            e("sum = (sum & 0xffff) + (sum >> 16);")
            e("sum = (sum & 0xffff) + (sum >> 16);")
            e("bit<16> check = ~sum[15:0];")
            e(f"{csum} = check == 0 ? 16w0xffff : check;")
        with e.block("if (meta.camus.deliver == 0 && meta.camus.drop == 0)"):
            e("route = true;       // no port of its own: routed by its new address (the template's LPM table)")
        e("meta.camus.call_id = 0;")
    return e.text().rstrip("\n")


def rewrite_walk(frame: bytes, locator: int) -> bytes:
    """The ingress tail's rewrite on an untagged IPv6/UDP frame."""
    out = bytearray(frame)
    dst_at, csum_at = 14 + 24, 14 + 40 + 6
    old, new = int.from_bytes(frame[dst_at:dst_at + 8], "big"), locator & ((1 << 64) - 1)
    out[dst_at:dst_at + 8] = new.to_bytes(8, "big")
    check = int.from_bytes(frame[csum_at:csum_at + 2], "big")
    if check and old != new:
        total = ~check & 0xFFFF
        for i in range(4):
            total += (~(old >> (48 - 16 * i)) & 0xFFFF) + ((new >> (48 - 16 * i)) & 0xFFFF)
        total = (total & 0xFFFF) + (total >> 16)
        total = (total & 0xFFFF) + (total >> 16)
        check = ~total & 0xFFFF
        out[csum_at:csum_at + 2] = (check or 0xFFFF).to_bytes(2, "big")
    return bytes(out)
