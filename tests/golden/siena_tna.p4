// camus-xdp packet subscriptions for Tofino (TNA).
// Generated from the message-format spec siena; do not edit. Rules never change this file:
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

const bit<16> CAMUS_UDP_PORT_0 = 9100;
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
    camus_bridge_t camus_bridge;
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    event_t event;
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
        hdr.camus_bridge.setValid();
        hdr.camus_bridge.kind = CAMUS_KIND_NORMAL;
        if (meta.camus.feed == 0) {
            if (hdr.ipv4.isValid()) { ipv4_lpm.apply(); }
            return;
        }
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
            ig_dprsr_md.drop_ctl = 1;
        }
        // one message per packet: nothing goes round again
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
        packet.emit(hdr.event);
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

control CamusEgress(inout headers hdr, inout metadata meta,
                    in egress_intrinsic_metadata_t eg_intr_md,
                    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    // one message per packet: no pruning table
    // port filters (structure/port_filters.py): a port's own rules, run on its copies
    action set_pf_state(bit<32> next) { meta.camus.pf_state = next; }
    action pf_keep() { }
    table t_pf_port {
        key = { eg_intr_md.egress_port : exact @name("egress_port"); }
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
        hdr.camus_bridge.setInvalid();
        if (meta.camus.recirc == 0 && meta.camus.classify == 1) {
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
                    eg_dprsr_md.drop_ctl = 1;
                    return;
                }
            }
        }
        // one message per packet: delivered copies need no pruning
    }
}

control CamusEgressDeparser(packet_out packet, inout headers hdr, in metadata meta,
                            in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        hdr.ipv4.csum = ipv4_checksum.update({ hdr.ipv4.vihl, hdr.ipv4.tos, hdr.ipv4.len, hdr.ipv4.id, hdr.ipv4.frag, hdr.ipv4.ttl, hdr.ipv4.proto, hdr.ipv4.src, hdr.ipv4.dst });
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.event);
    }
}

Pipeline(CamusIngressParser(), CamusIngress(), CamusIngressDeparser(),
         CamusEgressParser(), CamusEgress(), CamusEgressDeparser()) pipe;

Switch(pipe) main;
