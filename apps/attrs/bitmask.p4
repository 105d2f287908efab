// Generic attribute/value publications after EtherType 0x9001 (flexible pub/sub over P4):
// the header below is the attribute dictionary (attribute i = its i-th field); frames carry
// a 32-bit mask of the attributes present, then their values in id order.
// Adding an attribute is a dictionary entry: the data plane program reads the frame the same.
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header attrs_t {
    bit<32> sensor;       // 1
    bit<16> kind;         // 2
    bit<32> temperature;  // 3: centi-degrees
    bit<16> humidity;     // 4: per mille
    bit<8>  alarm;        // 5
    bit<64> serial;       // 6
    bit<32> zone;         // 7
}
struct headers { ethernet_t ethernet; attrs_t attrs; }
@pragma message_framing(attrs_bitmask)
@pragma query_field(attrs.sensor)
@pragma query_field(attrs.kind)
@pragma query_field(attrs.temperature)
@pragma query_field(attrs.humidity)
@pragma query_field(attrs.alarm)
@pragma query_field(attrs.zone)
