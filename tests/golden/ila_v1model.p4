// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec ila; do not edit. Rules never change this file:
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


const bit<32> CAMUS_RECIRC_SESSION = 250;   // mirroring_add 250 <recirculation port>
const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;
const bit<32> CAMUS_PORT_CELLS = 512;         // one counter cell per 9-bit port number
// The root state comes from the control plane (t_root default action), like every entry.

header ethernet_t {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

header ipv6_t {
    bit<4> version;
    bit<8> traffic_class;
    bit<20> flow_label;
    bit<16> payload_len;
    bit<8> next_hdr;
    bit<8> hop_limit;
    bit<128> src;
    bit<128> dst;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// one message per packet: no batch framing

struct headers {
    ethernet_t ethernet;
    ipv6_t ipv6;
    udp_t udp;
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

struct camus_ila_t {
    bit<1> set;         // ila(): a locator to write (t_leaf_calls' ila_rewrite)
    bit<64> locator;    // the IPv6 destination's new top 64 bits
}

struct metadata {
    camus_meta_t camus;
    camus_ila_t camus_ila;
}

parser CamusParser(packet_in packet, out headers hdr, inout metadata meta,
                   inout standard_metadata_t standard_metadata) {
    state start {
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            0x86dd: parse_ipv6;
            default: accept;
        }
    }
    state parse_ipv6 {
        packet.extract(hdr.ipv6);
        // extension headers (fragments too) are not subscription traffic: plain forwarding
        transition select(hdr.ipv6.next_hdr) {
            17: parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition camus_packet;
    }
    state camus_packet {
        // no message header: the packet itself is classified (its addresses, its ports)
        meta.camus.feed = 1;
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
    action ipv6_forward(bit<48> dst_mac, bit<9> port) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.src = hdr.ethernet.dst;
        hdr.ethernet.dst = dst_mac;
        hdr.ipv6.hop_limit = hdr.ipv6.hop_limit - 1;
    }
    action plain_drop() { mark_to_drop(standard_metadata); }

    table ipv6_lpm {
        key = { hdr.ipv6.dst : lpm; }
        actions = { ipv6_forward; plain_drop; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    table t_root {
        actions = { set_state; }
        default_action = set_state(0);   // replaced with the rule set's root state
        size = 1;
    }
    table t_ipv6_dst_hi {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.ipv6.dst[127:64] : lpm @name("ipv6.dst/hi");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_ipv6_dst_lo {
        key = {
            meta.camus.state : exact @name("meta.state");
            hdr.ipv6.dst[63:0] : lpm @name("ipv6.dst/lo");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_leaf {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_mgid; set_port; drop_msg; NoAction; }
        default_action = NoAction();   // no subscriber: not delivered
        size = 65536;
    }
    action ila_rewrite(bit<16> call_id, bit<64> locator) {
        meta.camus.call_id = call_id;
        meta.camus_ila.set = 1;
        meta.camus_ila.locator = locator;
    }

    table t_leaf_calls {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { call; ila_rewrite; NoAction; }
        default_action = NoAction();
        size = 65536;
    }

    apply {
        // plain traffic is routed; so is a feed packet a tail hands back to routing (ILA)
        bool route = meta.camus.feed == 0;
        if (meta.camus.feed == 1) {
            if (meta.camus.classify == 1) {
                t_root.apply();      // the root state, set by the control plane
                t_ipv6_dst_hi.apply();
                t_ipv6_dst_lo.apply();
                t_leaf.apply();
                t_leaf_calls.apply();
            }
            if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
                mark_to_drop(standard_metadata);
            }
            // ILA: the locator into the destination, the UDP checksum adjusted (bpf/camus_ila.h)
            if (meta.camus_ila.set == 1 && hdr.udp.isValid()) {
                bit<64> old_loc = hdr.ipv6.dst[127:64];
                bit<64> new_loc = meta.camus_ila.locator;
                hdr.ipv6.dst[127:64] = new_loc;
                if (hdr.udp.checksum != 0 && old_loc != new_loc) {
                    // RFC 1624: ~(~C + ~m + m') over the four 16-bit words that changed
                    bit<32> sum = (bit<32>)(~hdr.udp.checksum) + (bit<32>)(~old_loc[63:48]) + (bit<32>)(~old_loc[47:32]) + (bit<32>)(~old_loc[31:16]) + (bit<32>)(~old_loc[15:0]) + (bit<32>)new_loc[63:48] + (bit<32>)new_loc[47:32] + (bit<32>)new_loc[31:16] + (bit<32>)new_loc[15:0];
                    sum = (sum & 0xffff) + (sum >> 16);
                    sum = (sum & 0xffff) + (sum >> 16);
                    bit<16> check = ~sum[15:0];
                    hdr.udp.checksum = check == 0 ? 16w0xffff : check;
                }
                if (meta.camus.deliver == 0 && meta.camus.drop == 0) {
                    route = true;       // no port of its own: routed by its new address (the template's LPM table)
                }
                meta.camus.call_id = 0;
            }
            if (meta.camus.call_id != 0 && meta.camus.deliver == 0 && meta.camus.drop == 0) {
                route = true;       // custom actions: on, as the host stack would send it
            }
        }
        if (route && hdr.ipv6.isValid()) {
            ipv6_lpm.apply();     // one call site: bmv2 applies a table at most once per pass
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
    table t_pf_ipv6_dst_hi {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.ipv6.dst[127:64] : lpm @name("ipv6.dst/hi");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_pf_ipv6_dst_lo {
        key = {
            meta.camus.pf_state : exact @name("meta.pf_state");
            hdr.ipv6.dst[63:0] : lpm @name("ipv6.dst/lo");
        }
        actions = { set_pf_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
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
                t_pf_ipv6_dst_hi.apply();
                t_pf_ipv6_dst_lo.apply();
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
        // IPv6 has no header checksum
    }
}

control CamusDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv6);
        packet.emit(hdr.udp);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
