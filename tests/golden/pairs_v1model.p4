// camus-xdp packet subscriptions for bmv2 simple_switch (v1model): attribute frames.
// Generated from the message-format spec pairs; do not edit. Rules never change this file:
// subscriptions are table entries and multicast groups (entries.cli / entries.p4rt.json).
//
// A frame of EtherType 0x9001 carries one message of attributes (p4bsub): (id: 8 bits, value) pairs ended by id 0.
// The parser reads each attribute the frame carries into metadata (one that is not carried reads
// as 0) and keeps the frame's bytes in headers in the order they came, so a delivered frame
// leaves as it arrived. An attribute id the dictionary does not have, more attributes than it
// has, or a frame that ends early is never classified (dropped). Other frames are forwarded by
// their destination MAC (l2_fwd).
#include <core.p4>
#include <v1model.p4>

const bit<16> CAMUS_ETHERTYPE_ATTRS = 0x9001;
const bit<32> CAMUS_PORT_CELLS = 512;         // one counter cell per 9-bit port number

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header attrs_t {
    bit<32> sensor;
    bit<16> kind;
    bit<32> temperature;
    bit<16> humidity;
    bit<8> alarm;
    bit<64> serial;
    bit<32> zone;
}

header camus_byte_t {
    bit<8> b;           // one byte of the pairs, in the order they came
}

struct headers {
    ethernet_t ethernet;
    camus_byte_t[64] camus_pairs;
}

struct camus_meta_t {
    bit<32> state;
    bit<1> feed;        // an attribute frame
    bit<1> deliver;
    bit<1> drop;
    bit<1> classify;    // the frame was read whole: run the tables
    bit<16> call_id;    // custom action of the leaf (t_leaf_calls), for the CPU
    bit<64> svar;       // the window aggregate a t_svar<i> table matches
    bit<8> npairs;      // attribute pairs read so far
}

struct camus_attrs_t {
    bit<32> sensor;     // attribute 1
    bit<16> kind;     // attribute 2
    bit<32> temperature;     // attribute 3
    bit<16> humidity;     // attribute 4
    bit<8> alarm;     // attribute 5
    bit<64> serial;     // attribute 6
    bit<32> zone;     // attribute 7
}

struct metadata {
    camus_meta_t camus;
    camus_attrs_t camus_attrs;
}

parser CamusParser(packet_in packet, out headers hdr, inout metadata meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            CAMUS_ETHERTYPE_ATTRS: camus_attrs;
            default: accept;
        }
    }
    state camus_attrs {
        meta.camus.feed = 1;
        meta.camus_attrs.sensor = 0;
        meta.camus_attrs.kind = 0;
        meta.camus_attrs.temperature = 0;
        meta.camus_attrs.humidity = 0;
        meta.camus_attrs.alarm = 0;
        meta.camus_attrs.serial = 0;
        meta.camus_attrs.zone = 0;
        meta.camus.npairs = 0;
        transition camus_pair;
    }
    state camus_pair {
        transition select(meta.camus.npairs, packet.lookahead<bit<8>>()) {
            (_, 0): camus_pairs_end;
            (7, _): accept;          // more pairs than attributes: not classified
            (_, 1): camus_a1;
            (_, 2): camus_a2;
            (_, 3): camus_a3;
            (_, 4): camus_a4;
            (_, 5): camus_a5;
            (_, 6): camus_a6;
            (_, 7): camus_a7;
            default: accept;            // an id the dictionary lacks: not classified
        }
    }
    state camus_a1 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a1_0;
    }
    state camus_a1_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.sensor = (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a1_1;
    }
    state camus_a1_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.sensor = (meta.camus_attrs.sensor << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a1_2;
    }
    state camus_a1_2 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.sensor = (meta.camus_attrs.sensor << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a1_3;
    }
    state camus_a1_3 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.sensor = (meta.camus_attrs.sensor << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a2 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a2_0;
    }
    state camus_a2_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.kind = (bit<16>)hdr.camus_pairs.last.b;
        transition camus_a2_1;
    }
    state camus_a2_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.kind = (meta.camus_attrs.kind << 8) | (bit<16>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a3 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a3_0;
    }
    state camus_a3_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.temperature = (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a3_1;
    }
    state camus_a3_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.temperature = (meta.camus_attrs.temperature << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a3_2;
    }
    state camus_a3_2 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.temperature = (meta.camus_attrs.temperature << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a3_3;
    }
    state camus_a3_3 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.temperature = (meta.camus_attrs.temperature << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a4 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a4_0;
    }
    state camus_a4_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.humidity = (bit<16>)hdr.camus_pairs.last.b;
        transition camus_a4_1;
    }
    state camus_a4_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.humidity = (meta.camus_attrs.humidity << 8) | (bit<16>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a5 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a5_0;
    }
    state camus_a5_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.alarm = hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a6 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a6_0;
    }
    state camus_a6_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_1;
    }
    state camus_a6_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_2;
    }
    state camus_a6_2 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_3;
    }
    state camus_a6_3 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_4;
    }
    state camus_a6_4 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_5;
    }
    state camus_a6_5 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_6;
    }
    state camus_a6_6 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_a6_7;
    }
    state camus_a6_7 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.serial = (meta.camus_attrs.serial << 8) | (bit<64>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_a7 {
        packet.extract(hdr.camus_pairs.next);     // the id
        meta.camus.npairs = meta.camus.npairs + 1;
        transition camus_a7_0;
    }
    state camus_a7_0 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.zone = (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a7_1;
    }
    state camus_a7_1 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.zone = (meta.camus_attrs.zone << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a7_2;
    }
    state camus_a7_2 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.zone = (meta.camus_attrs.zone << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_a7_3;
    }
    state camus_a7_3 {
        packet.extract(hdr.camus_pairs.next);
        meta.camus_attrs.zone = (meta.camus_attrs.zone << 8) | (bit<32>)hdr.camus_pairs.last.b;
        transition camus_pair;
    }
    state camus_pairs_end {
        packet.extract(hdr.camus_pairs.next);     // the closing 0
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
    action l2_forward(bit<9> port) { standard_metadata.egress_spec = port; }
    action plain_drop() { mark_to_drop(standard_metadata); }

    table l2_fwd {
        key = { hdr.ethernet.dst : exact; }
        actions = { l2_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    table t_root {
        actions = { set_state; }
        default_action = set_state(0);   // replaced with the rule set's root state
        size = 1;
    }
    table t_attrs_sensor_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.sensor : exact @name("attrs.sensor");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_sensor {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.sensor : range @name("attrs.sensor");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_sensor_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_attrs_kind_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.kind : exact @name("attrs.kind");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_kind {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.kind : range @name("attrs.kind");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_kind_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_attrs_temperature_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.temperature : exact @name("attrs.temperature");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_temperature {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.temperature : range @name("attrs.temperature");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_temperature_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_attrs_humidity_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.humidity : exact @name("attrs.humidity");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_humidity {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.humidity : range @name("attrs.humidity");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_humidity_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_attrs_alarm_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.alarm : exact @name("attrs.alarm");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_alarm {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.alarm : range @name("attrs.alarm");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_alarm_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_attrs_zone_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.zone : exact @name("attrs.zone");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_attrs_zone {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_attrs.zone : range @name("attrs.zone");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_attrs_zone_any {
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
        if (meta.camus.feed == 0) {
            l2_fwd.apply();
            return;
        }
        if (meta.camus.classify == 1) {
            t_root.apply();      // the root state, set by the control plane
            if (!t_attrs_sensor_exact.apply().hit) {
                if (!t_attrs_sensor.apply().hit) {
                    t_attrs_sensor_any.apply();
                }
            }
            if (!t_attrs_kind_exact.apply().hit) {
                if (!t_attrs_kind.apply().hit) {
                    t_attrs_kind_any.apply();
                }
            }
            if (!t_attrs_temperature_exact.apply().hit) {
                if (!t_attrs_temperature.apply().hit) {
                    t_attrs_temperature_any.apply();
                }
            }
            if (!t_attrs_humidity_exact.apply().hit) {
                if (!t_attrs_humidity.apply().hit) {
                    t_attrs_humidity_any.apply();
                }
            }
            if (!t_attrs_alarm_exact.apply().hit) {
                if (!t_attrs_alarm.apply().hit) {
                    t_attrs_alarm_any.apply();
                }
            }
            if (!t_attrs_zone_exact.apply().hit) {
                if (!t_attrs_zone.apply().hit) {
                    t_attrs_zone_any.apply();
                }
            }
            t_leaf.apply();
            t_leaf_calls.apply();
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
        packet.emit(hdr.ethernet);
        packet.emit(hdr.camus_pairs);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
