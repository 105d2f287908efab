// camus-xdp packet subscriptions for bmv2 simple_switch (v1model): attribute frames.
// Generated from the message-format spec {{SPEC}}; do not edit. Rules never change this file:
// subscriptions are table entries and multicast groups (entries.cli / entries.p4rt.json).
//
// A frame of EtherType 0x9001 carries one message of attributes (p4bsub): {{ENCODING}}
// The parser reads each attribute the frame carries into metadata (one that is not carried reads
// as 0) and keeps the frame's bytes in headers in the order they came, so a delivered frame
// leaves as it arrived. An attribute id the dictionary does not have, more attributes than it
// has, or a frame that ends early is never classified (dropped). Other frames are forwarded by
// their destination MAC (l2_fwd).
#include <core.p4>
#include <v1model.p4>

const bit<16> CAMUS_ETHERTYPE_ATTRS = 0x9001;
const bit<32> CAMUS_PORT_CELLS = 512;         // one counter cell per 9-bit port number

{{HEADER_TYPES}}

{{ATTR_TYPES}}

struct headers {
{{HEADER_MEMBERS}}
}

struct camus_meta_t {
    bit<{{STATE_BITS}}> state;{{CODE_MEMBERS}}
    bit<1> feed;        // an attribute frame
    bit<1> deliver;
    bit<1> drop;
    bit<1> classify;    // the frame was read whole: run the tables
    bit<16> call_id;    // custom action of the leaf (t_leaf_calls), for the CPU
    bit<64> svar;       // the window aggregate a t_svar<i> table matches
    bit<8> npairs;      // attribute pairs read so far
}

{{ATTR_META}}

struct metadata {
    camus_meta_t camus;
    camus_attrs_t camus_attrs;
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
    action l2_forward(bit<9> port) { standard_metadata.egress_spec = port; }
    action plain_drop() { mark_to_drop(standard_metadata); }

    table l2_fwd {
        key = { hdr.{{ETH}}.{{ETH_DST}} : exact; }
        actions = { l2_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

{{TABLES}}

    apply {
        if (meta.camus.feed == 0) {
            l2_fwd.apply();
            return;
        }
        if (meta.camus.classify == 1) {
            t_root.apply();      // the root state, set by the control plane
{{APPLY}}
        }
        if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
            mark_to_drop(standard_metadata);
        }
    }
}

control CamusEgress(inout headers hdr, inout metadata meta,
                    inout standard_metadata_t standard_metadata) {
    // delivered copies per egress port (read over P4Runtime: CamusEgress.camus_delivered)
    counter(CAMUS_PORT_CELLS, CounterType.packets) camus_delivered;

    apply {
        if (meta.camus.deliver == 1) {
            camus_delivered.count((bit<32>)standard_metadata.egress_port);
        }
        // one message per frame: a delivered copy is the frame as it came
    }
}

control CamusComputeChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

control CamusDeparser(packet_out packet, in headers hdr) {
    apply {
{{EMITS}}
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
