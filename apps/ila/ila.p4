// Identifier-locator addressing (ILA, RFC 9386) as subscriptions (Camus app). Applications use
// SIR addresses: a SIR prefix (top 64 bits, the same for the whole domain) and an identifier
// (low 64 bits) that names a task, not where it runs. A rule per identifier says where it runs
// now: `ila(L::)` writes locator L into the destination's top 64 bits (the identifier stays,
// the UDP checksum is adjusted), and the packet goes on: its fwd() ports, and the host stack,
// which routes the locator. A task that moves is one changed rule. Packets arriving with this
// host's own locator are translated back to the SIR address the same way.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv6_t {
    bit<4> version; bit<8> traffic_class; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src; bit<128> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; }

@pragma query_field_lpm(ipv6.dst)
