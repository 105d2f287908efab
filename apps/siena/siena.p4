// Siena-style attribute/value events over UDP (one event per packet): integer and string
// attributes, filters are conjunctions of attribute constraints (bench/workloads.siena_schema).
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header event_t {
    bit<32> a0;
    bit<32> a1;
    bit<32> a3;
    bit<32> a4;
    bit<64> a2;
    bit<64> a5;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; event_t event; }
@pragma udp_port(9100)
@pragma query_field(event.a0)
@pragma query_field(event.a1)
@pragma query_field(event.a3)
@pragma query_field(event.a4)
@pragma query_field(event.a2)
@pragma query_field(event.a5)
@pragma query_type(event.a2, string)
@pragma query_type(event.a5, string)
