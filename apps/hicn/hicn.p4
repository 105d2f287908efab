// hICN meter (Camus app): hybrid ICN names content with IPv6 addresses; an interest for a piece
// of content is a packet to its name (here over hICN's UDP face, port 9695). A name prefix is a
// subscription on the destination address, and a per-name rate meter is a state function: each
// window counts the interests that match the prefix, so up to the rate they go to the producer,
// beyond it to a cache port. The meter is a counter per name, updated on the data plane (XDP map,
// switch register), never by the controller.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv6_t {
    bit<4> version; bit<8> traffic_class; bit<20> flow_label; bit<16> payload_len;
    bit<8> next_hdr; bit<8> hop_limit; bit<128> src; bit<128> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header hicn_t { bit<8> kind; bit<8> flags; bit<16> lifetime_ms; bit<32> segment; }   // kind 1: interest, 2: data
struct headers { ethernet_t ethernet; ipv6_t ipv6; udp_t udp; hicn_t hicn; }

@pragma udp_port(9695)
@pragma query_field_lpm(ipv6.dst)
@pragma query_field_exact(hicn.kind)
@pragma query_counter(meter, 1048576, 64)     // ~1 s windows (a power of two: switches number windows by a shift)
