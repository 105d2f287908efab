// camus-xdp packet subscriptions for Tofino (TNA).
// Generated from the message-format spec {{SPEC}}; do not edit. Rules never change this file:
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

{{CONSTANTS}}
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

{{HEADER_TYPES}}

{{FRAMING_TYPES}}

struct headers {
    camus_bridge_t camus_bridge;
{{HEADER_MEMBERS}}
}

struct camus_meta_t {
    bit<{{STATE_BITS}}> state;{{CODE_MEMBERS}}{{FILTER_MEMBERS}}
    bit<1> feed;        // a subscription packet (feed UDP port, framing parsed)
    bit<1> deliver;
    bit<1> drop;
    bit<1> classify;    // the message has the spec's length and type: run the tables
    bit<1> recirc;      // egress: the mirrored rest of a batch
    bit<16> call_id;    // custom action of the leaf (t_leaf_calls)
    bit<8> rest_parsed; // later messages of the batch the parser extracted (a constant per state)
    MirrorId_t mirror_session;
}

{{TOPIC_TYPES}}struct metadata {
    camus_meta_t camus;{{TOPIC_MEMBERS}}
}

parser CamusIngressParser(packet_in packet, out headers hdr, out metadata meta,
                          out ingress_intrinsic_metadata_t ig_intr_md) {
{{PARSER_STATES}}
}

control CamusIngress(inout headers hdr, inout metadata meta,
                     in ingress_intrinsic_metadata_t ig_intr_md,
                     in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                     inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                     inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, bit<1>>(1, CounterType_t.PACKETS) camus_oversize;

    action set_state(bit<{{STATE_BITS}}> next) { meta.camus.state = next; }
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
        hdr.{{ETH}}.{{ETH_SRC}} = hdr.{{ETH}}.{{ETH_DST}};
        hdr.{{ETH}}.{{ETH_DST}} = dst_mac;
        hdr.{{IP}}.{{IP_TTL}} = hdr.{{IP}}.{{IP_TTL}} - 1;
    }
    action plain_drop() { ig_dprsr_md.drop_ctl = 1; }

    table ipv4_lpm {
        key = { hdr.{{IP}}.{{IP_DST}} : lpm; }
        actions = { ipv4_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

{{TABLES}}

    apply {
        hdr.camus_bridge.setValid();
        hdr.camus_bridge.kind = CAMUS_KIND_NORMAL;
        if (meta.camus.feed == 0) {
            if (hdr.{{IP}}.isValid()) { ipv4_lpm.apply(); }
            return;
        }
        if (meta.camus.classify == 1) {
            t_root.apply();      // the root state, set by the control plane
{{APPLY}}
        }
        if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
            ig_dprsr_md.drop_ctl = 1;
        }
{{INGRESS_TAIL}}
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
{{EMITS}}
    }
}

parser CamusEgressParser(packet_in packet, out headers hdr, out metadata meta,
                         out egress_intrinsic_metadata_t eg_intr_md) {
{{EGRESS_PARSER_STATES}}
}

control CamusEgress(inout headers hdr, inout metadata meta,
                    in egress_intrinsic_metadata_t eg_intr_md,
                    in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                    inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                    inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
{{EGRESS_DECLS}}
{{EGRESS_FILTER_DECLS}}

    apply {
        hdr.camus_bridge.setInvalid();
{{EGRESS_FILTER}}
{{EGRESS_APPLY}}
    }
}

control CamusEgressDeparser(packet_out packet, inout headers hdr, in metadata meta,
                            in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;
    apply {
        hdr.{{IP}}.{{IP_CSUM}} = ipv4_checksum.update({ {{IP_CSUM_FIELDS}} });
{{EMITS}}
    }
}

Pipeline(CamusIngressParser(), CamusIngress(), CamusIngressDeparser(),
         CamusEgressParser(), CamusEgress(), CamusEgressDeparser()) pipe;

Switch(pipe) main;
