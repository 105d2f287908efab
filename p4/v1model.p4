// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec {{SPEC}}; do not edit. Rules never change this file:
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

{{CONSTANTS}}
const bit<32> CAMUS_RECIRC_SESSION = 250;   // mirroring_add 250 <recirculation port>
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> CAMUS_PORT_CELLS = 512;         // one counter cell per 9-bit port number
// The root state comes from the control plane (t_root default action), like every entry.

{{HEADER_TYPES}}

{{FRAMING_TYPES}}

struct headers {
{{HEADER_MEMBERS}}
}

struct camus_meta_t {
    bit<{{STATE_BITS}}> state;{{CODE_MEMBERS}}{{FILTER_MEMBERS}}
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

{{TOPIC_TYPES}}struct metadata {
    camus_meta_t camus;{{TOPIC_MEMBERS}}
}

parser CamusParser(packet_in packet, out headers hdr, inout metadata meta,
                   inout standard_metadata_t standard_metadata) {
{{PARSER_STATES}}
}

control CamusVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control CamusIngress(inout headers hdr, inout metadata meta,
                     inout standard_metadata_t standard_metadata) {
    action set_state(bit<{{STATE_BITS}}> next) { meta.camus.state = next; }
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
    action {{L3}}_forward(bit<48> dst_mac, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.{{ETH}}.{{ETH_SRC}} = hdr.{{ETH}}.{{ETH_DST}};
        hdr.{{ETH}}.{{ETH_DST}} = dst_mac;
        hdr.{{IP}}.{{IP_TTL}} = hdr.{{IP}}.{{IP_TTL}} - 1;
    }
    action plain_drop() { mark_to_drop(standard_metadata); }

    table {{L3}}_lpm {
        key = { hdr.{{IP}}.{{IP_DST}} : lpm; }
        actions = { {{L3}}_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

{{TABLES}}

    apply {
        // plain traffic is routed; so is a feed packet a tail hands back to routing (ILA)
        bool route = meta.camus.feed == 0;
        if (meta.camus.feed == 1) {
            if (meta.camus.classify == 1) {
                t_root.apply();      // the root state, set by the control plane
{{APPLY}}
            }
            if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
                mark_to_drop(standard_metadata);
            }
{{INGRESS_TAIL}}
        }
        if (route && hdr.{{IP}}.isValid()) {
            {{L3}}_lpm.apply();     // one call site: bmv2 applies a table at most once per pass
        }
    }
}

control CamusEgress(inout headers hdr, inout metadata meta,
                    inout standard_metadata_t standard_metadata) {
    // delivered copies per egress port (read over P4Runtime: CamusEgress.camus_delivered)
    counter(CAMUS_PORT_CELLS, CounterType.packets) camus_delivered;

{{EGRESS_FILTER_DECLS}}

    apply {
{{EGRESS_FILTER}}
        if (meta.camus.deliver == 1 && standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            camus_delivered.count((bit<32>)standard_metadata.egress_port);
        }
{{EGRESS_APPLY}}
    }
}

control CamusComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
{{IP_CHECKSUM}}
    }
}

control CamusDeparser(packet_out packet, in headers hdr) {
    apply {
{{EMITS}}
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
