// MQTT-style topic pub/sub over UDP (the eBPF pub/sub design): each notification carries its
// topic, NUL-padded in a 64-byte field, and a value. Rules match the topic with MQTT 3.1.1
// wildcards (`+` one level, `#` the rest) and may add conditions on the value. Notifications
// are batched in MoldUDP64 (the edge broker sends those that arrive together in one datagram);
// each is classified, and each subscriber's copy keeps only its own.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header moldudp64_t { bit<80> session; bit<64> sequence_number; bit<16> message_count; }
header note_t {
    bit<512> topic;     // MQTT topic: '/'-separated levels, NUL-padded
    bit<32>  value;     // a reading, a price, a counter: whatever the publisher sends
    bit<32>  length;    // payload bytes after this header
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; moldudp64_t moldudp64; note_t note; }
@pragma udp_port(9200)
@pragma query_field(note.topic)
@pragma query_type(note.topic, topic)
@pragma topic_levels(note.topic, 6)
@pragma query_field(note.value)
