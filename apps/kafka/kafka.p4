// Kafka shim (Camus app): producers send records over UDP with a small header naming the topic
// and partition; consumers subscribe to a topic, some partitions of it, or records whose key
// hash falls in a range (a consumer group's share), so the network does the fan-out a broker
// would. The topic name is a fixed 8-byte string, space padded (the XDP program reads query
// fields of up to 64 bits; longer names would take the topic fields' label path).
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src; bit<32> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header record_t {
    bit<64>  topic;
    bit<16>  partition;
    bit<32>  key_hash;
    bit<64>  offset;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; record_t record; }

@pragma udp_port(9092)
@pragma query_field_exact(record.topic)
@pragma query_type(record.topic, string)
@pragma query_field(record.partition)
@pragma query_field(record.key_hash)
