// IP forwarding as subscriptions (Camus app): a routing table is a set of prefix filters on the
// destination address, next to content filters on the same packets (here a service id in the
// payload). Longest-prefix-wins is written explicitly: a covering route excludes its more
// specific ones (`and not dst == ...`), since overlapping subscriptions all deliver.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src; bit<32> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header svc_t { bit<16> service; bit<16> flags; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; svc_t svc; }

@pragma udp_port(7000)
@pragma query_field_lpm(ipv4.dst)
@pragma query_field_exact(svc.service)
