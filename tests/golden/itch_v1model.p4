// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec itch; do not edit. Rules never change this file:
// subscriptions are table entries and multicast groups (entries.cli / entries.p4rt.json).
//
// One message per pipeline pass (the Camus paper's scheme): the parser extracts the first
// message of a MoldUDP64 batch; ingress classifies it through the staged tables and sends the
// packet to the message's port or multicast group; when more messages follow, an ingress-to-
// egress clone goes to the recirculation session, and egress removes the classified message and
// recirculates the rest. Delivered copies are pruned in egress to the classified message alone
// (truncate + lengths, count and checksums fixed), so every port receives exactly the messages
// it subscribed to. Packets that are not the feed take plain IPv4 forwarding (brownfield).
#include <core.p4>
#include <v1model.p4>

const bit<16> CAMUS_UDP_PORT_0 = 26400;
const bit<16> CAMUS_MSG_BYTES = 36;
const bit<32> CAMUS_RECIRC_SESSION = 250;   // mirroring_add 250 <recirculation port>
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> CAMUS_PORT_CELLS = 512;         // one counter cell per 9-bit port number
// The root state comes from the control plane (t_root default action), like every entry.

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

header camus_skip_t {
    varbit<11776> bytes;   // a message of another length: carried, never classified
}

struct headers {
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    moldudp64_t moldudp64;
    camus_len_t camus_len;
    itch_add_order_t add_order;
    camus_skip_t camus_skip;
}

struct camus_meta_t {
    bit<32> state;
    bit<32> pf_state;   // egress: the port filter's state
    @field_list(1)
    bit<8> passes;      // messages already classified (recirculations so far)
    bit<1> feed;        // a subscription packet (feed UDP port, framing parsed)
    bit<1> deliver;
    bit<1> drop;
    bit<1> classify;    // the message has the spec's length and type: run the tables
    bit<16> call_id;    // custom actions of the leaf (t_leaf_calls, calls.json): routed on unless the switch runs them
    bit<64> svar;       // the window aggregate a t_svar<i> table matches
    bit<16> extra;      // the message's bytes past its header (MoldUDP64 length - header)
}

struct metadata {
    camus_meta_t camus;
}

parser CamusParser(packet_in packet, out headers hdr, inout metadata meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
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
        // the header and maybe more (a payload): bit 15 of the difference is set when shorter
        meta.camus.extra = hdr.camus_len.len - CAMUS_MSG_BYTES;
        transition select(meta.camus.extra[15:15]) {
            0: parse_add_order;
            default: parse_camus_skip;
        }
    }
    state parse_camus_skip {
        // another message type: carried past so the rest of the batch recirculates
        packet.extract(hdr.camus_skip, (bit<32>)hdr.camus_len.len * 8);
        transition accept;
    }
    state parse_add_order {
        packet.extract(hdr.add_order);
        // bytes past the header (a topic's payload) stay with the message: egress removes
        // or keeps them with it
        transition select(meta.camus.extra) {
            0: camus_msg_kind;
            default: camus_msg_payload;
        }
    }
    state camus_msg_payload {
        packet.extract(hdr.camus_skip, (bit<32>)meta.camus.extra * 8);
        transition camus_msg_kind;
    }
    state camus_msg_kind {
        transition select(hdr.add_order.msg_type) {
            65: camus_classify;
            default: accept;
        }
    }
    state camus_classify {
        meta.camus.classify = 1;
        transition accept;
    }
}

control CamusVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control CamusIngress(inout headers hdr, inout metadata meta,
                     inout standard_metadata_t standard_metadata) {
    action set_state(bit<32> next) { meta.camus.state = next; }
    action set_mgid(bit<16> mgid) {
        standard_metadata.mcast_grp = mgid;
        meta.camus.deliver = 1;
    }
    action set_port(bit<9> port) {
        standard_metadata.egress_spec = port;
        meta.camus.deliver = 1;
    }
    action drop_msg() { meta.camus.drop = 1; }
    action call(bit<16> call_id) { meta.camus.call_id = call_id; }
    action ipv4_forward(bit<48> dst_mac, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src = hdr.ethernet.dst;
        hdr.ethernet.dst = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action plain_drop() { mark_to_drop(standard_metadata); }

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
    // query_counter my_counter: 1000000 us is not a power of two; the switch numbers
    // windows with a shift, so rules using it are refused (the XDP target takes them)
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
        // plain traffic is routed; so is a feed packet a tail hands back to routing (ILA)
        bool route = meta.camus.feed == 0;
        if (meta.camus.feed == 1) {
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
                mark_to_drop(standard_metadata);
            }
            if (hdr.moldudp64.message_count > 1 && standard_metadata.parser_error == error.NoError) {
                // more messages follow: a copy goes round again without this one (not after a parser
                // error: the rest of the batch would be read from the wrong offset)
                clone_preserving_field_list(CloneType.I2E, CAMUS_RECIRC_SESSION, 1);
            }
        }
        if (route && hdr.ipv4.isValid()) {
            ipv4_lpm.apply();     // one call site: bmv2 applies a table at most once per pass
        }
    }
}

control CamusEgress(inout headers hdr, inout metadata meta,
                    inout standard_metadata_t standard_metadata) {
    // delivered copies per egress port (read over P4Runtime: CamusEgress.camus_delivered)
    counter(CAMUS_PORT_CELLS, CounterType.packets) camus_delivered;

    // port filters (structure/port_filters.py): a port's own rules, run on its copies
    action set_pf_state(bit<32> next) { meta.camus.pf_state = next; }
    action pf_keep() { }
    table t_pf_port {
        key = { standard_metadata.egress_port : exact @name("egress_port"); }
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
        if (meta.camus.deliver == 1 && standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE) {
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
                    mark_to_drop(standard_metadata);
                    return;
                }
            }
        }
        if (meta.camus.deliver == 1 && standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            camus_delivered.count((bit<32>)standard_metadata.egress_port);
        }
        if (!hdr.moldudp64.isValid() || !hdr.camus_len.isValid()) { return; }
        bit<16> gone = hdr.camus_len.len + 2;
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            // the rest of the batch: drop the classified message and go round again
            hdr.camus_len.setInvalid();
            hdr.add_order.setInvalid();
            hdr.camus_skip.setInvalid();
            hdr.moldudp64.message_count = hdr.moldudp64.message_count - 1;
            hdr.udp.length = hdr.udp.length - gone;
            hdr.ipv4.total_len = hdr.ipv4.total_len - gone;
            hdr.udp.checksum = 0;
            meta.camus.passes = meta.camus.passes + 1;
            recirculate_preserving_field_list(1);
            return;
        }
        // a delivered copy: the classified message alone
        bit<16> keep = 20 + gone;
        hdr.moldudp64.message_count = 1;
        hdr.udp.length = 8 + keep;
        hdr.ipv4.total_len = ((bit<16>)hdr.ipv4.ihl) * 4 + 8 + keep;
        hdr.udp.checksum = 0;    // optional over IPv4
        truncate((bit<32>)(14 + hdr.ipv4.total_len));
    }
}

control CamusComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control CamusDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.moldudp64);
        packet.emit(hdr.camus_len);
        packet.emit(hdr.add_order);
        packet.emit(hdr.camus_skip);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
