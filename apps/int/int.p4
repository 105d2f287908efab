// In-band network telemetry reports over UDP: one report per packet.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src; bit<32> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header int_report_t {
    bit<32> switch_id;
    bit<16> ingress_port;
    bit<16> egress_port;
    bit<32> hop_latency;       // nanoseconds
    bit<32> queue_occupancy;   // cells
    bit<32> flow_src;          // IPv4 source of the reported flow
    bit<32> flow_dst;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; int_report_t int_report; }

@pragma udp_port(32766)
@query_field_exact(int_report.switch_id)
@query_field(int_report.hop_latency)
@query_field(int_report.queue_occupancy)
@query_field_lpm(int_report.flow_dst)
@query_counter(latency_window, 131072, 256)   // ~131 ms: a power of two, so switches can number windows with a shift
