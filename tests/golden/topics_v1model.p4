// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec topics; do not edit. Rules never change this file:
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

const bit<16> CAMUS_UDP_PORT_0 = 9200;
const bit<16> CAMUS_MSG_BYTES = 72;
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

header moldudp64_t {
    bit<80> session;
    bit<64> sequence_number;
    bit<16> message_count;
}

header note_t {
    bit<512> topic;
    bit<32> value;
    bit<32> length;
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
    note_t note;
    camus_skip_t camus_skip;
}

struct camus_meta_t {
    bit<32> state;
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

struct camus_note_topic_t {
    bit<16> depth;      // levels in the topic
    bit<1> sys;         // level 0 starts with '$' (wildcards skip it)
    bit<512> l0;      // level 0: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> l1;      // level 1: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> l2;      // level 2: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> l3;      // level 3: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> l4;      // level 4: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> l5;      // level 5: its bytes, left-aligned, NUL-padded; 0 if none
    bit<512> rest;    // the field past the bytes read
    bit<512> start;   // the field from the current level on
    bit<16> len;        // the current level's bits so far
    bit<16> pos;        // bytes read
}

struct metadata {
    camus_meta_t camus;
    camus_note_topic_t camus_note_topic;
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
            0: parse_note;
            default: parse_camus_skip;
        }
    }
    state parse_camus_skip {
        // another message type: carried past so the rest of the batch recirculates
        packet.extract(hdr.camus_skip, (bit<32>)hdr.camus_len.len * 8);
        transition accept;
    }
    state parse_note {
        packet.extract(hdr.note);
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
        transition camus_classify;
    }
    state camus_classify {
        meta.camus.classify = 1;
        transition camus_note_topic_begin;
    }
    state camus_note_topic_begin {
        // note.topic: '/'-separated levels, NUL-padded (mqtt)
        meta.camus_note_topic.rest = hdr.note.topic;
        meta.camus_note_topic.start = hdr.note.topic;
        meta.camus_note_topic.depth = 1;
        meta.camus_note_topic.len = 0;
        meta.camus_note_topic.pos = 0;
        meta.camus_note_topic.l0 = 0;
        meta.camus_note_topic.l1 = 0;
        meta.camus_note_topic.l2 = 0;
        meta.camus_note_topic.l3 = 0;
        meta.camus_note_topic.l4 = 0;
        meta.camus_note_topic.l5 = 0;
        meta.camus_note_topic.sys = 0;
        transition select(hdr.note.topic[511:504]) {
            0x24: camus_note_topic_sys;      // '$'
            default: camus_note_topic_scan;
        }
    }
    state camus_note_topic_sys {
        meta.camus_note_topic.sys = 1;
        transition camus_note_topic_scan;
    }
    state camus_note_topic_scan {
        transition select(meta.camus_note_topic.pos, meta.camus_note_topic.rest[511:504]) {
            (16w64, _): camus_note_topic_end;      // every byte read
            (_, 8w0): camus_note_topic_end;          // the NUL padding
            (_, 8w47): camus_note_topic_sep;         // '/'
            default: camus_note_topic_byte;
        }
    }
    state camus_note_topic_byte {
        meta.camus_note_topic.rest = meta.camus_note_topic.rest << 8;
        meta.camus_note_topic.len = meta.camus_note_topic.len + 8;
        meta.camus_note_topic.pos = meta.camus_note_topic.pos + 1;
        transition camus_note_topic_scan;
    }
    state camus_note_topic_sep {
        transition select(meta.camus_note_topic.depth) {
            1: camus_note_topic_sep0;
            2: camus_note_topic_sep1;
            3: camus_note_topic_sep2;
            4: camus_note_topic_sep3;
            5: camus_note_topic_sep4;
            6: camus_note_topic_sep5;
            default: camus_note_topic_next;        // a level without a variable
        }
    }
    state camus_note_topic_sep0 {
        meta.camus_note_topic.l0 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_sep1 {
        meta.camus_note_topic.l1 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_sep2 {
        meta.camus_note_topic.l2 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_sep3 {
        meta.camus_note_topic.l3 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_sep4 {
        meta.camus_note_topic.l4 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_sep5 {
        meta.camus_note_topic.l5 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition camus_note_topic_next;
    }
    state camus_note_topic_end {
        transition select(meta.camus_note_topic.depth) {
            1: camus_note_topic_end0;
            2: camus_note_topic_end1;
            3: camus_note_topic_end2;
            4: camus_note_topic_end3;
            5: camus_note_topic_end4;
            6: camus_note_topic_end5;
            default: accept;        // a level without a variable
        }
    }
    state camus_note_topic_end0 {
        meta.camus_note_topic.l0 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_end1 {
        meta.camus_note_topic.l1 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_end2 {
        meta.camus_note_topic.l2 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_end3 {
        meta.camus_note_topic.l3 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_end4 {
        meta.camus_note_topic.l4 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_end5 {
        meta.camus_note_topic.l5 = meta.camus_note_topic.start & ~((~(bit<512>)0) >> meta.camus_note_topic.len);
        transition accept;
    }
    state camus_note_topic_next {
        // past the separator: the next level starts
        meta.camus_note_topic.rest = meta.camus_note_topic.rest << 8;
        meta.camus_note_topic.start = meta.camus_note_topic.rest;
        meta.camus_note_topic.len = 0;
        meta.camus_note_topic.pos = meta.camus_note_topic.pos + 1;
        meta.camus_note_topic.depth = meta.camus_note_topic.depth + 1;
        transition camus_note_topic_scan;
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
    table t_note_topic_depth_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.depth : exact @name("note.topic/depth");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_note_topic_depth {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.depth : range @name("note.topic/depth");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_depth_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_sys {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.sys : exact @name("note.topic/sys");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_sys_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_0 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l0 : exact @name("note.topic/0");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_0_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_1 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l1 : exact @name("note.topic/1");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_1_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_2 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l2 : exact @name("note.topic/2");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_2_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_3 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l3 : exact @name("note.topic/3");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_3_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_4 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l4 : exact @name("note.topic/4");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_4_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_topic_5 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_note_topic.l5 : exact @name("note.topic/5");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_topic_5_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_note_value_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.note.value : exact @name("note.value");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_note_value {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.note.value : range @name("note.value");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_note_value_any {
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
                if (!t_note_topic_depth_exact.apply().hit) {
                    if (!t_note_topic_depth.apply().hit) {
                        t_note_topic_depth_any.apply();
                    }
                }
                if (!t_note_topic_sys.apply().hit) {
                    t_note_topic_sys_any.apply();
                }
                if (!t_note_topic_0.apply().hit) {
                    t_note_topic_0_any.apply();
                }
                if (!t_note_topic_1.apply().hit) {
                    t_note_topic_1_any.apply();
                }
                if (!t_note_topic_2.apply().hit) {
                    t_note_topic_2_any.apply();
                }
                if (!t_note_topic_3.apply().hit) {
                    t_note_topic_3_any.apply();
                }
                if (!t_note_topic_4.apply().hit) {
                    t_note_topic_4_any.apply();
                }
                if (!t_note_topic_5.apply().hit) {
                    t_note_topic_5_any.apply();
                }
                if (!t_note_value_exact.apply().hit) {
                    if (!t_note_value.apply().hit) {
                        t_note_value_any.apply();
                    }
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

    // no header field egress can read: no port filters

    apply {
        // no port filters
        if (meta.camus.deliver == 1 && standard_metadata.instance_type != PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            camus_delivered.count((bit<32>)standard_metadata.egress_port);
        }
        if (!hdr.moldudp64.isValid() || !hdr.camus_len.isValid()) { return; }
        bit<16> gone = hdr.camus_len.len + 2;
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE) {
            // the rest of the batch: drop the classified message and go round again
            hdr.camus_len.setInvalid();
            hdr.note.setInvalid();
            hdr.camus_skip.setInvalid();
            hdr.moldudp64.message_count = hdr.moldudp64.message_count - 1;
            hdr.udp.len = hdr.udp.len - gone;
            hdr.ipv4.len = hdr.ipv4.len - gone;
            hdr.udp.csum = 0;
            meta.camus.passes = meta.camus.passes + 1;
            recirculate_preserving_field_list(1);
            return;
        }
        // a delivered copy: the classified message alone
        bit<16> keep = 20 + gone;
        hdr.moldudp64.message_count = 1;
        hdr.udp.len = 8 + keep;
        hdr.ipv4.len = ((bit<16>)hdr.ipv4.vihl[3:0]) * 4 + 8 + keep;
        hdr.udp.csum = 0;    // optional over IPv4
        truncate((bit<32>)(14 + hdr.ipv4.len));
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
        packet.emit(hdr.moldudp64);
        packet.emit(hdr.camus_len);
        packet.emit(hdr.note);
        packet.emit(hdr.camus_skip);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
