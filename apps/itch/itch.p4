// NASDAQ TotalView-ITCH 5.0 "Add Order" messages, batched in MoldUDP64 over UDP.
// A MoldUDP64 packet is a 20-byte header (session, sequence number, message count) followed,
// for each message, by a 2-byte length and the message. Only Add Order ('A', 36 bytes) messages
// are subscribed to; other message types never match a subscription.

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;

header ethernet_t {
    mac_addr_t dst;
    mac_addr_t src;
    bit<16>    ether_type;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    ipv4_addr_t src;
    ipv4_addr_t dst;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

header moldudp64_t {
    bit<80> session;
    bit<64> sequence_number;
    bit<16> message_count;
}

header itch_add_order_t {
    bit<8>  msg_type;          // 'A' = 0x41
    bit<16> stock_locate;
    bit<16> tracking_number;
    bit<48> timestamp;         // nanoseconds since midnight
    bit<64> order_ref_number;
    bit<8>  buy_sell_indicator; // 'B' or 'S'
    bit<32> shares;
    bit<64> stock;             // 8 ASCII characters, space padded
    bit<32> price;             // price * 10000
}

struct headers {
    ethernet_t       ethernet;
    ipv4_t           ipv4;
    udp_t            udp;
    moldudp64_t      moldudp64;
    itch_add_order_t add_order;
}

@pragma udp_port(26400)
@pragma message_type(add_order.msg_type, 0x41)
@pragma query_field(add_order.stock)
@pragma query_type(add_order.stock, string)
@pragma query_field(add_order.price)
@pragma query_field(add_order.shares)
@pragma query_field_exact(add_order.buy_sell_indicator)
@pragma query_counter(my_counter, 1000000, 1024)
