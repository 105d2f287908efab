// The ITCH Add Order spec in the original Camus form: P4_14 header_type declarations, header
// instances in parse order, and @pragma lines. Compiles to the same tables as apps/itch/itch.p4.
header_type ethernet_t {
    fields {
        dstAddr : 48;
        srcAddr : 48;
        etherType : 16;
    }
}

header_type ipv4_t {
    fields {
        version : 4;
        ihl : 4;
        diffserv : 8;
        totalLen : 16;
        identification : 16;
        flags : 3;
        fragOffset : 13;
        ttl : 8;
        protocol : 8;
        hdrChecksum : 16;
        srcAddr : 32;
        dstAddr : 32;
    }
}

header_type udp_t {
    fields {
        srcPort : 16;
        dstPort : 16;
        length_ : 16;
        checksum : 16;
    }
}

header_type moldudp64_t {
    fields {
        session : 80;
        sequence_number : 64;
        message_count : 16;
    }
}

header_type itch_add_order_t {
    fields {
        msg_type : 8;
        stock_locate : 16;
        tracking_number : 16;
        timestamp : 48;
        order_ref_number : 64;
        buy_sell_indicator : 8;
        shares : 32;
        stock : 64;
        price : 32;
    }
}

header ethernet_t ethernet;
header ipv4_t ipv4;
header udp_t udp;
header moldudp64_t moldudp64;
header itch_add_order_t add_order;

@pragma udp_port 26400
@pragma message_type add_order.msg_type 0x41
@pragma query_field(add_order.shares)
@pragma query_field(add_order.price)
@pragma query_field_exact(add_order.stock)
@pragma query_field_exact(add_order.buy_sell_indicator)
@pragma query_counter(my_counter, 1000000, 1024)
