// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec siena; do not edit. Rules never change this file:
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

const bit<16> CAMUS_UDP_PORT_0 = 9100;
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
    bit<8> vihl;
    bit<8> tos;
    bit<16> len;
    bit<16> id;
    bit<16> frag;
    bit<8> ttl;
    bit<8> proto;
    bit<16> csum;
    bit<32> src;
    bit<32> dst;
}

header udp_t {
    bit<16> sport;
    bit<16> dport;
    bit<16> len;
    bit<16> csum;
}

header event_t {
    bit<32> a0;
    bit<32> a1;
    bit<32> a3;
    bit<32> a4;
    bit<64> a2;
    bit<64> a5;
}

// one message per packet: no batch framing

struct headers {
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    event_t event;
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
        transition select(hdr.ipv4.vihl[3:0], hdr.ipv4.proto, hdr.ipv4.frag[13:13], hdr.ipv4.frag[12:0]) {
            (5, 17, 0, 0): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dport) {
            CAMUS_UDP_PORT_0: parse_event;
            default: accept;
        }
    }
    state parse_event {
        meta.camus.feed = 1;
        packet.extract(hdr.event);
        transition camus_classify;
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
    table t_event_a0_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a0 : exact @name("event.a0");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a0 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a0 : range @name("event.a0");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a0_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_event_a1_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a1 : exact @name("event.a1");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a1 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a1 : range @name("event.a1");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a1_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_event_a3_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a3 : exact @name("event.a3");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a3 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a3 : range @name("event.a3");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a3_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_event_a4_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a4 : exact @name("event.a4");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a4 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a4 : range @name("event.a4");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a4_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_event_a2_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a2 : exact @name("event.a2");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a2 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a2 : range @name("event.a2");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a2_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_event_a5_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a5 : exact @name("event.a5");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_event_a5 {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.event.a5 : range @name("event.a5");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_event_a5_any {
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
        // plain traffic is routed; so is a feed packet a tail hands back to routing (ILA)
        bool route = meta.camus.feed == 0;
        if (meta.camus.feed == 1) {
            if (meta.camus.classify == 1) {
                t_root.apply();      // the root state, set by the control plane
                if (!t_event_a0_exact.apply().hit) {
                    if (!t_event_a0.apply().hit) {
                        t_event_a0_any.apply();
                    }
                }
                if (!t_event_a1_exact.apply().hit) {
                    if (!t_event_a1.apply().hit) {
                        t_event_a1_any.apply();
                    }
                }
                if (!t_event_a3_exact.apply().hit) {
                    if (!t_event_a3.apply().hit) {
                        t_event_a3_any.apply();
                    }
                }
                if (!t_event_a4_exact.apply().hit) {
                    if (!t_event_a4.apply().hit) {
                        t_event_a4_any.apply();
                    }
                }
                if (!t_event_a2_exact.apply().hit) {
                    if (!t_event_a2.apply().hit) {
                        t_event_a2_any.apply();
                    }
                }
                if (!t_event_a5_exact.apply().hit) {
                    if (!t_event_a5.apply().hit) {
                        t_event_a5_any.apply();
                    }
                }
                t_leaf.apply();
                t_leaf_calls.apply();
            }
            if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
                mark_to_drop(standard_metadata);
            }
            // one message per packet: nothing goes round again
            if (meta.camus.call_id != 0 && meta.camus.deliver == 0 && meta.camus.drop == 0) {
                route = true;       // custom actions: on, as the host stack would send it
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
    table t_pf_event_a0_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a0 : exact @name("event.a0");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a0 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a0 : range @name("event.a0");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a0_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_event_a1_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a1 : exact @name("event.a1");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a1 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a1 : range @name("event.a1");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a1_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_event_a3_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a3 : exact @name("event.a3");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a3 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a3 : range @name("event.a3");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a3_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_event_a4_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a4 : exact @name("event.a4");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a4 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a4 : range @name("event.a4");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a4_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_event_a2_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a2 : exact @name("event.a2");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a2 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a2 : range @name("event.a2");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a2_any {
        key = { meta.camus.pf_state : exact @name("meta.pf_state"); }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_pf_event_a5_exact {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a5 : exact @name("event.a5");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests
        size = 65536;
    }
    table t_pf_event_a5 {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.event.a5 : range @name("event.a5");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_event_a5_any {
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
                if (!t_pf_event_a0_exact.apply().hit) {
                    if (!t_pf_event_a0.apply().hit) {
                        t_pf_event_a0_any.apply();
                    }
                }
                if (!t_pf_event_a1_exact.apply().hit) {
                    if (!t_pf_event_a1.apply().hit) {
                        t_pf_event_a1_any.apply();
                    }
                }
                if (!t_pf_event_a3_exact.apply().hit) {
                    if (!t_pf_event_a3.apply().hit) {
                        t_pf_event_a3_any.apply();
                    }
                }
                if (!t_pf_event_a4_exact.apply().hit) {
                    if (!t_pf_event_a4.apply().hit) {
                        t_pf_event_a4_any.apply();
                    }
                }
                if (!t_pf_event_a2_exact.apply().hit) {
                    if (!t_pf_event_a2.apply().hit) {
                        t_pf_event_a2_any.apply();
                    }
                }
                if (!t_pf_event_a5_exact.apply().hit) {
                    if (!t_pf_event_a5.apply().hit) {
                        t_pf_event_a5_any.apply();
                    }
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
        // one message per packet: delivered copies need no pruning
    }
}

control CamusComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.vihl, hdr.ipv4.tos, hdr.ipv4.len, hdr.ipv4.id, hdr.ipv4.frag, hdr.ipv4.ttl, hdr.ipv4.proto, hdr.ipv4.src, hdr.ipv4.dst },
            hdr.ipv4.csum, HashAlgorithm.csum16);
    }
}

control CamusDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.event);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
