#include <core.p4>
#include <v1model.p4>
#define MAX 10
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
                bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header label_t { bit<32> topic; }
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; label_t label; }
struct metadata { bit<16> x; }
parser MyParser(packet_in packet, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { packet.extract(hdr.ethernet); transition select(hdr.ethernet.ether_type) { 0x800: parse_ipv4; default: accept; } }
    state parse_ipv4 { packet.extract(hdr.ipv4); transition accept; }
}
control MyIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; hdr.ipv4.ttl = hdr.ipv4.ttl - 1; }
    action mark() { meta.x = (bit<16>)(hdr.label.topic[15:0]) + 3 * 2 / 1 % 7; }
    apply {
        if (hdr.ipv4.isValid() && hdr.ipv4.ttl > 1 || !hdr.udp.isValid()) { mark(); }
        meta.x = meta.x << 2 | meta.x >> 1 ^ ~meta.x & 0xff;
        bool b = meta.x != 0 ? true : false;
    }
}
@pragma query_field(label.topic)
@pragma udp_port(5000)
