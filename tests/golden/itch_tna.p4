// camus-xdp packet subscriptions for Tofino (TNA).
// Generated from the message-format spec itch; do not edit. Rules never change this file:
// subscriptions are table entries and multicast groups (bfrt.py / entries.p4rt.json).
//
// One message per pipeline pass (the Camus paper's scheme): ingress classifies the first message
// of a MoldUDP64 batch and sends the packet to that message's port or multicast group; when more
// messages follow, an ingress mirror copy goes to the recirculation session (a recirculation
// port), whose egress removes the classified message so the rest comes back to ingress. Egress
// prunes delivered copies to the classified message: the later messages are parsed into a header
// stack and invalidated, lengths and count fixed. Tofino parses fixed-size headers only, so a
// batch is delivered when its messages have the spec's size and it holds at most 1 + the stack
// size; other batches are counted and dropped. Other packets take plain IPv4 forwarding.
#include <core.p4>
#include <tna.p4>

const bit<16> CAMUS_UDP_PORT_0 = 26400;
const bit<16> CAMUS_MSG_BYTES = 36;
const MirrorId_t CAMUS_RECIRC_SESSION = 250;   // a mirror session to a recirculation port
const bit<3> CAMUS_MIRROR_RECIRC = 1;
const bit<8> CAMUS_KIND_NORMAL = 0;
const bit<8> CAMUS_KIND_RECIRC = 1;
// The root state comes from the control plane (t_root default action), like every entry.

// Prepended to every packet between ingress and egress: says whether this copy is the
// mirrored rest of a batch (the "spare header field" the Camus paper uses for pruning).
header camus_bridge_t {
    bit<8> kind;
}

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4> version;
    bit<4> ihl;
    bit<8> diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3> flags;
    bit<13> frag_offset;
    bit<8> ttl;
    bit<8> protocol;
    bit<16> hdr_checksum;
    bit<32> src;
    bit<32> dst;
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
    bit<8> msg_type;
    bit<16> stock_locate;
    bit<16> tracking_number;
    bit<48> timestamp;
    bit<64> order_ref_number;
    bit<8> buy_sell_indicator;
    bit<32> shares;
    bit<64> stock;
    bit<32> price;
}

header camus_len_t {
    bit<16> len;        // MoldUDP64 length prefix of the message that follows
}

header camus_rest_t {
    bit<16> len;
    bit<288> body;   // a later message of the batch
}

struct headers {
    camus_bridge_t camus_bridge;
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    moldudp64_t moldudp64;
    camus_len_t camus_len;
    itch_add_order_t add_order;
    camus_rest_t[15] camus_rest;
}

struct camus_meta_t {
    bit<32> state;
    bit<32> pf_state;   // egress: the port filter's state
    bit<1> feed;        // a subscription packet (feed UDP port, framing parsed)
    bit<1> deliver;
    bit<1> drop;
    bit<1> classify;    // the message has the spec's length and type: run the tables
    bit<1> recirc;      // egress: the mirrored rest of a batch
    bit<16> call_id;    // custom action of the leaf (t_leaf_calls)
    bit<8> rest_parsed; // later messages of the batch the parser extracted (a constant per state)
    MirrorId_t mirror_session;
}

struct metadata {
    camus_meta_t camus;
}

parser CamusIngressParser(packet_in packet, out headers hdr, out metadata meta,
                          out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        packet.extract(ig_intr_md);
        packet.advance(PORT_METADATA_SIZE);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        // options and fragments are not subscription traffic: plain forwarding
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol, hdr.ipv4.flags[0:0], hdr.ipv4.frag_offset) {
            (5, 17, 0, 0): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            CAMUS_UDP_PORT_0: parse_moldudp64;
            default: accept;
        }
    }
    state parse_moldudp64 {
        packet.extract(hdr.moldudp64);
        meta.camus.feed = 1;
        transition select(hdr.moldudp64.message_count) {
            0: accept;            // heartbeat: nothing to deliver
            default: parse_camus_len;
        }
    }
    state parse_camus_len {
        packet.extract(hdr.camus_len);
        transition select(hdr.camus_len.len) {
            CAMUS_MSG_BYTES: parse_add_order;
            default: parse_camus_skip;
        }
    }
    state parse_camus_skip {
        // Tofino parses fixed-size headers only: a message of another length ends the batch
        transition accept;
    }
    state parse_add_order {
        packet.extract(hdr.add_order);
        transition select(hdr.add_order.msg_type) {
            65: camus_classify;
            default: accept;
        }
    }
    state camus_classify {
        meta.camus.classify = 1;
        meta.camus.rest_parsed = 0;      // Tofino's metadata starts undefined
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_0;
            default: accept;
        }
    }
    state parse_camus_rest_0 {
        // the rest of the batch as headers, so that egress can prune it
        packet.extract(hdr.camus_rest[0]);
        meta.camus.rest_parsed = 1;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_1;
            default: accept;
        }
    }
    state parse_camus_rest_1 {
        packet.extract(hdr.camus_rest[1]);
        meta.camus.rest_parsed = 2;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_2;
            default: accept;
        }
    }
    state parse_camus_rest_2 {
        packet.extract(hdr.camus_rest[2]);
        meta.camus.rest_parsed = 3;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_3;
            default: accept;
        }
    }
    state parse_camus_rest_3 {
        packet.extract(hdr.camus_rest[3]);
        meta.camus.rest_parsed = 4;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_4;
            default: accept;
        }
    }
    state parse_camus_rest_4 {
        packet.extract(hdr.camus_rest[4]);
        meta.camus.rest_parsed = 5;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_5;
            default: accept;
        }
    }
    state parse_camus_rest_5 {
        packet.extract(hdr.camus_rest[5]);
        meta.camus.rest_parsed = 6;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_6;
            default: accept;
        }
    }
    state parse_camus_rest_6 {
        packet.extract(hdr.camus_rest[6]);
        meta.camus.rest_parsed = 7;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_7;
            default: accept;
        }
    }
    state parse_camus_rest_7 {
        packet.extract(hdr.camus_rest[7]);
        meta.camus.rest_parsed = 8;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_8;
            default: accept;
        }
    }
    state parse_camus_rest_8 {
        packet.extract(hdr.camus_rest[8]);
        meta.camus.rest_parsed = 9;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_9;
            default: accept;
        }
    }
    state parse_camus_rest_9 {
        packet.extract(hdr.camus_rest[9]);
        meta.camus.rest_parsed = 10;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_10;
            default: accept;
        }
    }
    state parse_camus_rest_10 {
        packet.extract(hdr.camus_rest[10]);
        meta.camus.rest_parsed = 11;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_11;
            default: accept;
        }
    }
    state parse_camus_rest_11 {
        packet.extract(hdr.camus_rest[11]);
        meta.camus.rest_parsed = 12;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_12;
            default: accept;
        }
    }
    state parse_camus_rest_12 {
        packet.extract(hdr.camus_rest[12]);
        meta.camus.rest_parsed = 13;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_13;
            default: accept;
        }
    }
    state parse_camus_rest_13 {
        packet.extract(hdr.camus_rest[13]);
        meta.camus.rest_parsed = 14;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_14;
            default: accept;
        }
    }
    state parse_camus_rest_14 {
        packet.extract(hdr.camus_rest[14]);
        meta.camus.rest_parsed = 15;
        transition accept;
    }
}

control CamusIngress(inout headers hdr, inout metadata meta,
                     in ingress_intrinsic_metadata_t ig_intr_md,
                     in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS) camus_oversize;

    action set_state(bit<32> next) { meta.camus.state = next; }
    action set_mgid(MulticastGroupId_t mgid) {
        ig_tm_md.mcast_grp_a = mgid;
        meta.camus.deliver = 1;
    }
    action set_port(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        meta.camus.deliver = 1;
    }
    action drop_msg() { meta.camus.drop = 1; }
    action call(bit<16> call_id) { meta.camus.call_id = call_id; }
    action ipv4_forward(bit<48> dst_mac, PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.src = hdr.ethernet.dst;
        hdr.ethernet.dst = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action plain_drop() { ig_dprsr_md.drop_ctl = 1; }

    table ipv4_lpm {
        key = { hdr.ipv4.dst : lpm; }
        actions = { ipv4_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    table t_root {
        actions = { set_state; }
        default_action = set_state(0);   // replaced with the rule set's root state
        size = 1;
    }
    table t_add_order_stock_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.stock : exact @name("add_order.stock");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_add_order_stock {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.stock : range @name("add_order.stock");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_add_order_stock_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_add_order_price_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.price : exact @name("add_order.price");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_add_order_price {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.price : range @name("add_order.price");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_add_order_price_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_add_order_shares_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.shares : exact @name("add_order.shares");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_add_order_shares {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.shares : range @name("add_order.shares");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_add_order_shares_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_add_order_buy_sell_indicator {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.add_order.buy_sell_indicator : exact @name("add_order.buy_sell_indicator");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_add_order_buy_sell_indicator_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_leaf {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_mgid; set_port; drop_msg; NoAction; }
        default_action = NoAction();   // no subscriber: not delivered
        size = 65536;
    }
    table t_leaf_calls {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { call; NoAction; }
        default_action = NoAction();
        size = 65536;
    }

    apply {
        hdr.camus_bridge.setValid();
        hdr.camus_bridge.kind = CAMUS_KIND_NORMAL;
        if (meta.camus.feed == 0) {
            if (hdr.ipv4.isValid()) { ipv4_lpm.apply(); }
            return;
        }
        if (meta.camus.classify == 1) {
            t_root.apply();      // the root state, set by the control plane
            if (!t_add_order_stock_exact.apply().hit) {
                if (!t_add_order_stock.apply().hit) {
                    t_add_order_stock_any.apply();
                }
            }
            if (!t_add_order_price_exact.apply().hit) {
                if (!t_add_order_price.apply().hit) {
                    t_add_order_price_any.apply();
                }
            }
            if (!t_add_order_shares_exact.apply().hit) {
                if (!t_add_order_shares.apply().hit) {
                    t_add_order_shares_any.apply();
                }
            }
            if (!t_add_order_buy_sell_indicator.apply().hit) {
                t_add_order_buy_sell_indicator_any.apply();
            }
            t_leaf.apply();
            t_leaf_calls.apply();
        }
        if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
            ig_dprsr_md.drop_ctl = 1;
        }
        if (!hdr.add_order.isValid() || hdr.moldudp64.message_count > 16) {
            // a first message of another size, or a batch longer than the parser holds: egress
            // could neither prune it nor remove the message (counted, not delivered)
            camus_oversize.count(0);
            ig_dprsr_md.drop_ctl = 1;
        }
        else if (hdr.moldudp64.message_count > 1) {
            // more messages follow: a mirrored copy goes round again without this one
            ig_dprsr_md.mirror_type = CAMUS_MIRROR_RECIRC;
            meta.camus.mirror_session = CAMUS_RECIRC_SESSION;
        }
    }
}

control CamusIngressDeparser(packet_out packet, inout headers hdr, in metadata meta,
                             in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Mirror() mirror;
    apply {
        if (ig_dprsr_md.mirror_type == CAMUS_MIRROR_RECIRC) {
            mirror.emit<camus_bridge_t>(meta.camus.mirror_session, { CAMUS_KIND_RECIRC });
        }
        packet.emit(hdr.camus_bridge);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.moldudp64);
        packet.emit(hdr.camus_len);
        packet.emit(hdr.add_order);
        packet.emit(hdr.camus_rest);
    }
}

parser CamusEgressParser(packet_in packet, out headers hdr, out metadata meta,
                         out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        packet.extract(eg_intr_md);
        packet.extract(hdr.camus_bridge);
        transition select(hdr.camus_bridge.kind) {
            CAMUS_KIND_RECIRC: camus_mark_recirc;
            default: parse_ethernet;
        }
    }
    state camus_mark_recirc {
        meta.camus.recirc = 1;
        packet.advance(8);     // the mirrored packet still carries its normal bridge byte
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            0x0800: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        // options and fragments are not subscription traffic: plain forwarding
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol, hdr.ipv4.flags[0:0], hdr.ipv4.frag_offset) {
            (5, 17, 0, 0): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            CAMUS_UDP_PORT_0: parse_moldudp64;
            default: accept;
        }
    }
    state parse_moldudp64 {
        packet.extract(hdr.moldudp64);
        meta.camus.feed = 1;
        transition select(hdr.moldudp64.message_count) {
            0: accept;            // heartbeat: nothing to deliver
            default: parse_camus_len;
        }
    }
    state parse_camus_len {
        packet.extract(hdr.camus_len);
        transition select(hdr.camus_len.len) {
            CAMUS_MSG_BYTES: parse_add_order;
            default: parse_camus_skip;
        }
    }
    state parse_camus_skip {
        // Tofino parses fixed-size headers only: a message of another length ends the batch
        transition accept;
    }
    state parse_add_order {
        packet.extract(hdr.add_order);
        transition select(hdr.add_order.msg_type) {
            65: camus_classify;
            default: accept;
        }
    }
    state camus_classify {
        meta.camus.classify = 1;
        meta.camus.rest_parsed = 0;      // Tofino's metadata starts undefined
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_0;
            default: accept;
        }
    }
    state parse_camus_rest_0 {
        // the rest of the batch as headers, so that egress can prune it
        packet.extract(hdr.camus_rest[0]);
        meta.camus.rest_parsed = 1;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_1;
            default: accept;
        }
    }
    state parse_camus_rest_1 {
        packet.extract(hdr.camus_rest[1]);
        meta.camus.rest_parsed = 2;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_2;
            default: accept;
        }
    }
    state parse_camus_rest_2 {
        packet.extract(hdr.camus_rest[2]);
        meta.camus.rest_parsed = 3;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_3;
            default: accept;
        }
    }
    state parse_camus_rest_3 {
        packet.extract(hdr.camus_rest[3]);
        meta.camus.rest_parsed = 4;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_4;
            default: accept;
        }
    }
    state parse_camus_rest_4 {
        packet.extract(hdr.camus_rest[4]);
        meta.camus.rest_parsed = 5;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_5;
            default: accept;
        }
    }
    state parse_camus_rest_5 {
        packet.extract(hdr.camus_rest[5]);
        meta.camus.rest_parsed = 6;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_6;
            default: accept;
        }
    }
    state parse_camus_rest_6 {
        packet.extract(hdr.camus_rest[6]);
        meta.camus.rest_parsed = 7;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_7;
            default: accept;
        }
    }
    state parse_camus_rest_7 {
        packet.extract(hdr.camus_rest[7]);
        meta.camus.rest_parsed = 8;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_8;
            default: accept;
        }
    }
    state parse_camus_rest_8 {
        packet.extract(hdr.camus_rest[8]);
        meta.camus.rest_parsed = 9;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_9;
            default: accept;
        }
    }
    state parse_camus_rest_9 {
        packet.extract(hdr.camus_rest[9]);
        meta.camus.rest_parsed = 10;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_10;
            default: accept;
        }
    }
    state parse_camus_rest_10 {
        packet.extract(hdr.camus_rest[10]);
        meta.camus.rest_parsed = 11;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_11;
            default: accept;
        }
    }
    state parse_camus_rest_11 {
        packet.extract(hdr.camus_rest[11]);
        meta.camus.rest_parsed = 12;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_12;
            default: accept;
        }
    }
    state parse_camus_rest_12 {
        packet.extract(hdr.camus_rest[12]);
        meta.camus.rest_parsed = 13;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_13;
            default: accept;
        }
    }
    state parse_camus_rest_13 {
        packet.extract(hdr.camus_rest[13]);
        meta.camus.rest_parsed = 14;
        transition select(packet.lookahead<bit<16>>()) {
            CAMUS_MSG_BYTES: parse_camus_rest_14;
            default: accept;
        }
    }
    state parse_camus_rest_14 {
        packet.extract(hdr.camus_rest[14]);
        meta.camus.rest_parsed = 15;
        transition accept;
    }
}

control CamusEgress(inout headers hdr, inout metadata meta,
                    in egress_intrinsic_metadata_t eg_intr_md,
                    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    action camus_prune(bit<16> cut) {
        hdr.camus_rest[0].setInvalid();
        hdr.camus_rest[1].setInvalid();
        hdr.camus_rest[2].setInvalid();
        hdr.camus_rest[3].setInvalid();
        hdr.camus_rest[4].setInvalid();
        hdr.camus_rest[5].setInvalid();
        hdr.camus_rest[6].setInvalid();
        hdr.camus_rest[7].setInvalid();
        hdr.camus_rest[8].setInvalid();
        hdr.camus_rest[9].setInvalid();
        hdr.camus_rest[10].setInvalid();
        hdr.camus_rest[11].setInvalid();
        hdr.camus_rest[12].setInvalid();
        hdr.camus_rest[13].setInvalid();
        hdr.camus_rest[14].setInvalid();
        hdr.udp.length = hdr.udp.length - cut;
        hdr.ipv4.total_len = hdr.ipv4.total_len - cut;
        hdr.moldudp64.message_count = 1;
    }
    action camus_unprunable() {
        eg_dprsr_md.drop_ctl = 1;
    }
    table t_camus_prune {
        key = {
            hdr.moldudp64.message_count : exact @name("moldudp64.message_count");
            meta.camus.rest_parsed : exact @name("meta.rest_parsed");
        }
        actions = { camus_prune; camus_unprunable; }
        default_action = camus_unprunable();
        size = 16;
        const entries = {
            (1, 0) : camus_prune(0);
            (2, 1) : camus_prune(38);
            (3, 2) : camus_prune(76);
            (4, 3) : camus_prune(114);
            (5, 4) : camus_prune(152);
            (6, 5) : camus_prune(190);
            (7, 6) : camus_prune(228);
            (8, 7) : camus_prune(266);
            (9, 8) : camus_prune(304);
            (10, 9) : camus_prune(342);
            (11, 10) : camus_prune(380);
            (12, 11) : camus_prune(418);
            (13, 12) : camus_prune(456);
            (14, 13) : camus_prune(494);
            (15, 14) : camus_prune(532);
            (16, 15) : camus_prune(570);
        }
    }
    // port filters (structure/port_filters.py): a port's own rules, run on its copies
    action set_pf_state(bit<32> next) { meta.camus.pf_state = next; }
    action pf_keep() { }
    table t_pf_port {
        key = { eg_intr_md.egress_port : exact @name("egress_port"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // no filter: the copy is kept
        size = 512;
    }
    table t_pf_add_order_stock_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.stock : exact @name("add_order.stock");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_add_order_stock {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.stock : range @name("add_order.stock");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_add_order_stock_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_add_order_price_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.price : exact @name("add_order.price");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_add_order_price {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.price : range @name("add_order.price");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_add_order_price_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_add_order_shares_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.shares : exact @name("add_order.shares");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_add_order_shares {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.shares : range @name("add_order.shares");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_add_order_shares_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_add_order_buy_sell_indicator {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.add_order.buy_sell_indicator : exact @name("add_order.buy_sell_indicator");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_add_order_buy_sell_indicator_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_accept {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { pf_keep; NoAction; }
        default_action = NoAction();   // the port's rules do not select the message: dropped
        size = 65536;
    }

    apply {
        hdr.camus_bridge.setInvalid();
        if (meta.camus.recirc == 0 && meta.camus.classify == 1) {
            // a port with a filter keeps its copy only when its own rules select the message
            if (t_pf_port.apply().hit) {
                if (!t_pf_add_order_stock_exact.apply().hit) {
                    if (!t_pf_add_order_stock.apply().hit) {
                        t_pf_add_order_stock_any.apply();
                    }
                }
                if (!t_pf_add_order_price_exact.apply().hit) {
                    if (!t_pf_add_order_price.apply().hit) {
                        t_pf_add_order_price_any.apply();
                    }
                }
                if (!t_pf_add_order_shares_exact.apply().hit) {
                    if (!t_pf_add_order_shares.apply().hit) {
                        t_pf_add_order_shares_any.apply();
                    }
                }
                if (!t_pf_add_order_buy_sell_indicator.apply().hit) {
                    t_pf_add_order_buy_sell_indicator_any.apply();
                }
                if (!t_pf_accept.apply().hit) {
                    eg_dprsr_md.drop_ctl = 1;
                    return;
                }
            }
        }
        if (!hdr.moldudp64.isValid() || !hdr.camus_len.isValid()) { return; }
        bit<16> gone = 38;
        if (meta.camus.recirc == 1) {
            // the mirrored rest of the batch: drop the classified message, leave the rest
            hdr.camus_len.setInvalid();
            hdr.add_order.setInvalid();
            hdr.moldudp64.message_count = hdr.moldudp64.message_count - 1;
            hdr.udp.length = hdr.udp.length - gone;
            hdr.ipv4.total_len = hdr.ipv4.total_len - gone;
            hdr.udp.checksum = 0;
            return;
        }
        // a delivered copy: the classified message alone. The lengths to cut are precomputed per
        // count (no multiplier in Tofino's ALUs); a batch whose later messages the parser did not all
        // take (another size) has no entry: dropped, never over-delivered
        t_camus_prune.apply();
        hdr.udp.checksum = 0;    // optional over IPv4
    }
}

control CamusEgressDeparser(packet_out packet, inout headers hdr, in metadata meta,
                            in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        hdr.ipv4.hdr_checksum = ipv4_checksum.update({ hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst });
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.moldudp64);
        packet.emit(hdr.camus_len);
        packet.emit(hdr.add_order);
        packet.emit(hdr.camus_rest);
    }
}

Pipeline(CamusIngressParser(), CamusIngress(), CamusIngressDeparser(),
         CamusEgressParser(), CamusEgress(), CamusEgressDeparser()) pipe;

Switch(pipe) main;
