// Car tracker (Camus app): position updates from a fleet, one per UDP datagram. Subscribers
// follow geo-fences (latitude/longitude boxes), speeding alerts and single cars.
// Coordinates are microdegrees offset by 180e6, so every value is an unsigned 32-bit number.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len; bit<16> identification;
    bit<3> flags; bit<13> frag_offset; bit<8> ttl; bit<8> protocol; bit<16> hdr_checksum;
    bit<32> src; bit<32> dst;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header position_t {
    bit<32> car_id;
    bit<32> lat;        // microdegrees + 180,000,000
    bit<32> lon;        // microdegrees + 180,000,000
    bit<16> speed;      // km/h
    bit<16> heading;    // degrees
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; position_t position; }

@pragma udp_port(9200)
@pragma query_field_exact(position.car_id)
@pragma query_field(position.lat)
@pragma query_field(position.lon)
@pragma query_field(position.speed)
@pragma query_counter(seq, 0, 64)   // every(n) (rules_sampled.txt): an endless count per sampled filter
