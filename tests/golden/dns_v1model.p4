// camus-xdp packet subscriptions for bmv2 simple_switch (v1model).
// Generated from the message-format spec dns; do not edit. Rules never change this file:
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

const bit<16> CAMUS_UDP_PORT_0 = 53;
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

header dns_t {
    bit<16> id;
    bit<16> flags;
    bit<16> qdcount;
    bit<16> ancount;
    bit<16> nscount;
    bit<16> arcount;
}

header camus_byte_t {
    bit<8> b;           // one byte of the question's name, as it came
}
header camus_dns_q_t {
    bit<16> qtype;
    bit<16> qclass;
}
header camus_dns_rr_t {
    bit<16> name;       // 0xc00c: the question's name
    bit<16> rtype;
    bit<16> rclass;
    bit<32> ttl;
    bit<16> rdlength;
    bit<32> addr;
}

// one message per packet: no batch framing

struct headers {
    ethernet_t ethernet;
    ipv4_t ipv4;
    udp_t udp;
    dns_t dns;
    camus_byte_t[64] camus_qname;
    camus_dns_q_t camus_dns_q;
    camus_dns_rr_t camus_dns_rr;
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

struct camus_dns_qname_t {
    bit<16> depth;      // levels in the name
    bit<512> l0;      // label 0 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<512> l1;      // label 1 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<512> l2;      // label 2 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<512> l3;      // label 3 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<512> l4;      // label 4 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<512> l5;      // label 5 from the right, lower-cased, left-aligned, NUL-padded; 0 if none
    bit<1> answering;   // answerDNS: the leaf answers (t_leaf_calls' answer_dns)
    bit<32> answer;     // with this address (0.0.0.0 too: a sinkhole's answer)
    bit<512> cur;     // the current label so far, left-aligned
    bit<16> shift;      // where its next byte goes
    bit<8> left;        // bytes left in the current label
    bit<16> pos;        // the name's bytes read
    bit<16> room;       // bit 15: the next label would not end within the field
    bit<1> more;        // a label was read
    bit<1> cut;         // a NUL byte was met: the rest is not in the text
    bit<1> text;        // the text is not empty
    bit<1> ok;          // the name was read whole and well-formed
}

struct metadata {
    camus_meta_t camus;
    camus_dns_qname_t camus_dns_qname;
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
            CAMUS_UDP_PORT_0: parse_dns;
            default: accept;
        }
    }
    state parse_dns {
        meta.camus.feed = 1;
        packet.extract(hdr.dns);
        transition camus_classify;
    }
    state camus_classify {
        // classified once the DNS name is read (a packet ending inside it is not)
        transition camus_dns_qname_begin;
    }
    state camus_dns_qname_begin {
        // dns.qname: a DNS name in wire format, labels counted from the right
        meta.camus_dns_qname.depth = 0;
        meta.camus_dns_qname.l0 = 0;
        meta.camus_dns_qname.l1 = 0;
        meta.camus_dns_qname.l2 = 0;
        meta.camus_dns_qname.l3 = 0;
        meta.camus_dns_qname.l4 = 0;
        meta.camus_dns_qname.l5 = 0;
        meta.camus_dns_qname.answering = 0;
        meta.camus_dns_qname.answer = 0;
        meta.camus_dns_qname.cur = 0;
        meta.camus_dns_qname.left = 0;
        meta.camus_dns_qname.pos = 0;
        meta.camus_dns_qname.more = 0;
        meta.camus_dns_qname.cut = 0;
        meta.camus_dns_qname.text = 0;
        meta.camus_dns_qname.ok = 0;
        meta.camus_dns_qname.shift = 504;
        transition camus_dns_qname_len;
    }
    state camus_dns_qname_len {
        packet.extract(hdr.camus_qname.next);      // a length byte
        meta.camus_dns_qname.left = hdr.camus_qname.last.b;
        meta.camus_dns_qname.room = 63 - (meta.camus_dns_qname.pos + 1 + (bit<16>)hdr.camus_qname.last.b);
        meta.camus_dns_qname.pos = meta.camus_dns_qname.pos + 1;
        transition select(hdr.camus_qname.last.b, meta.camus_dns_qname.room[15:15]) {
            (0, _): camus_dns_qname_root;          // the root label: the name ends
            (0x40 &&& 0xc0, _): camus_dns_qname_bad;   // a label over 63 bytes (or a pointer)
            (0x80 &&& 0x80, _): camus_dns_qname_bad;
            (_, 1): camus_dns_qname_bad;           // the name would not end within 64 bytes
            default: camus_dns_qname_label;
        }
    }
    state camus_dns_qname_label {
        transition select(meta.camus_dns_qname.more, meta.camus_dns_qname.cut) {
            (1, 0): camus_dns_qname_sep;           // the dot between two labels
            default: camus_dns_qname_go;
        }
    }
    state camus_dns_qname_sep {
        // a label ends: the others move up one, it becomes label 0 from the right
        meta.camus_dns_qname.l5 = meta.camus_dns_qname.l4;
        meta.camus_dns_qname.l4 = meta.camus_dns_qname.l3;
        meta.camus_dns_qname.l3 = meta.camus_dns_qname.l2;
        meta.camus_dns_qname.l2 = meta.camus_dns_qname.l1;
        meta.camus_dns_qname.l1 = meta.camus_dns_qname.l0;
        meta.camus_dns_qname.l0 = meta.camus_dns_qname.cur;
        meta.camus_dns_qname.cur = 0;
        meta.camus_dns_qname.shift = 504;
        meta.camus_dns_qname.depth = meta.camus_dns_qname.depth + 1;
        transition camus_dns_qname_go;
    }
    state camus_dns_qname_go {
        meta.camus_dns_qname.more = 1;
        transition camus_dns_qname_byte;
    }
    state camus_dns_qname_byte {
        packet.extract(hdr.camus_qname.next);
        meta.camus_dns_qname.pos = meta.camus_dns_qname.pos + 1;
        meta.camus_dns_qname.left = meta.camus_dns_qname.left - 1;
        transition select(meta.camus_dns_qname.cut, hdr.camus_qname.last.b) {
            (1, _): camus_dns_qname_next;          // past a NUL: not in the text
            (0, 0): camus_dns_qname_nul;
            (0, 0x2e): camus_dns_qname_dot;        // '.' inside a label separates too
            (0, 0x41 &&& 0xff): camus_dns_qname_upper;
            (0, 0x42 &&& 0xfe): camus_dns_qname_upper;
            (0, 0x44 &&& 0xfc): camus_dns_qname_upper;
            (0, 0x48 &&& 0xf8): camus_dns_qname_upper;
            (0, 0x50 &&& 0xf8): camus_dns_qname_upper;
            (0, 0x58 &&& 0xfe): camus_dns_qname_upper;
            (0, 0x5a &&& 0xff): camus_dns_qname_upper;
            default: camus_dns_qname_char;
        }
    }
    state camus_dns_qname_char {
        meta.camus_dns_qname.cur = meta.camus_dns_qname.cur | ((bit<512>)hdr.camus_qname.last.b << meta.camus_dns_qname.shift);
        meta.camus_dns_qname.shift = meta.camus_dns_qname.shift - 8;
        meta.camus_dns_qname.text = 1;
        transition camus_dns_qname_next;
    }
    state camus_dns_qname_upper {
        meta.camus_dns_qname.cur = meta.camus_dns_qname.cur | ((bit<512>)(hdr.camus_qname.last.b | 0x20) << meta.camus_dns_qname.shift);
        meta.camus_dns_qname.shift = meta.camus_dns_qname.shift - 8;
        meta.camus_dns_qname.text = 1;
        transition camus_dns_qname_next;
    }
    state camus_dns_qname_dot {
        meta.camus_dns_qname.text = 1;
        // a label ends: the others move up one, it becomes label 0 from the right
        meta.camus_dns_qname.l5 = meta.camus_dns_qname.l4;
        meta.camus_dns_qname.l4 = meta.camus_dns_qname.l3;
        meta.camus_dns_qname.l3 = meta.camus_dns_qname.l2;
        meta.camus_dns_qname.l2 = meta.camus_dns_qname.l1;
        meta.camus_dns_qname.l1 = meta.camus_dns_qname.l0;
        meta.camus_dns_qname.l0 = meta.camus_dns_qname.cur;
        meta.camus_dns_qname.cur = 0;
        meta.camus_dns_qname.shift = 504;
        meta.camus_dns_qname.depth = meta.camus_dns_qname.depth + 1;
        transition camus_dns_qname_next;
    }
    state camus_dns_qname_nul {
        meta.camus_dns_qname.cut = 1;
        transition camus_dns_qname_next;
    }
    state camus_dns_qname_next {
        transition select(meta.camus_dns_qname.left) {
            0: camus_dns_qname_len;
            default: camus_dns_qname_byte;
        }
    }
    state camus_dns_qname_root {
        meta.camus_dns_qname.ok = 1;
        meta.camus.classify = 1;
        transition select(meta.camus_dns_qname.text) {
            1: camus_dns_qname_last;
            default: camus_dns_qname_question;    // an empty text: no labels
        }
    }
    state camus_dns_qname_last {
        // a label ends: the others move up one, it becomes label 0 from the right
        meta.camus_dns_qname.l5 = meta.camus_dns_qname.l4;
        meta.camus_dns_qname.l4 = meta.camus_dns_qname.l3;
        meta.camus_dns_qname.l3 = meta.camus_dns_qname.l2;
        meta.camus_dns_qname.l2 = meta.camus_dns_qname.l1;
        meta.camus_dns_qname.l1 = meta.camus_dns_qname.l0;
        meta.camus_dns_qname.l0 = meta.camus_dns_qname.cur;
        meta.camus_dns_qname.cur = 0;
        meta.camus_dns_qname.shift = 504;
        meta.camus_dns_qname.depth = meta.camus_dns_qname.depth + 1;
        transition camus_dns_qname_question;
    }
    state camus_dns_qname_question {
        packet.extract(hdr.camus_dns_q);   // a packet without it is classified, not answered
        transition accept;
    }
    state camus_dns_qname_bad {
        // malformed: no labels (the XDP program's reading), classified as such
        meta.camus_dns_qname.depth = 0;
        meta.camus_dns_qname.l0 = 0;
        meta.camus_dns_qname.l1 = 0;
        meta.camus_dns_qname.l2 = 0;
        meta.camus_dns_qname.l3 = 0;
        meta.camus_dns_qname.l4 = 0;
        meta.camus_dns_qname.l5 = 0;
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
    table t_dns_qname_depth_exact {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.depth : exact @name("dns.qname/depth");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // not one of the values this state tests for equality
        size = 65536;
    }
    table t_dns_qname_depth {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.depth : range @name("dns.qname/depth");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_depth_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_0 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l0 : exact @name("dns.qname/0");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_0_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_1 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l1 : exact @name("dns.qname/1");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_1_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_2 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l2 : exact @name("dns.qname/2");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_2_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_3 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l3 : exact @name("dns.qname/3");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_3_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_4 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l4 : exact @name("dns.qname/4");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_4_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_dns_qname_5 {
        key = {
            meta.camus.state : exact @name("meta.state");
            meta.camus_dns_qname.l5 : exact @name("dns.qname/5");
        }
        actions = { set_state; NoAction; }
        default_action = NoAction();   // a state this table does not test passes through
        size = 65536;
    }
    table t_dns_qname_5_any {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_state; NoAction; }
        default_action = NoAction();
        size = 65536;
    }
    table t_leaf {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { set_mgid; set_port; drop_msg; call; NoAction; }
        default_action = call(1);   // query_default_action(resolve)
        size = 65536;
    }
    action answer_dns(bit<16> call_id, bit<32> addr) {
        meta.camus.call_id = call_id;      // the host answers what the switch cannot (calls.json)
        meta.camus_dns_qname.answering = 1;
        meta.camus_dns_qname.answer = addr;
    }

    table t_leaf_calls {
        key = { meta.camus.state : exact @name("meta.state"); }
        actions = { call; answer_dns; NoAction; }
        default_action = NoAction();
        size = 65536;
    }

    apply {
        // plain traffic is routed; so is a feed packet a tail hands back to routing (ILA)
        bool route = meta.camus.feed == 0;
        if (meta.camus.feed == 1) {
            if (meta.camus.classify == 1) {
                t_root.apply();      // the root state, set by the control plane
                if (!t_dns_qname_depth_exact.apply().hit) {
                    if (!t_dns_qname_depth.apply().hit) {
                        t_dns_qname_depth_any.apply();
                    }
                }
                if (!t_dns_qname_0.apply().hit) {
                    t_dns_qname_0_any.apply();
                }
                if (!t_dns_qname_1.apply().hit) {
                    t_dns_qname_1_any.apply();
                }
                if (!t_dns_qname_2.apply().hit) {
                    t_dns_qname_2_any.apply();
                }
                if (!t_dns_qname_3.apply().hit) {
                    t_dns_qname_3_any.apply();
                }
                if (!t_dns_qname_4.apply().hit) {
                    t_dns_qname_4_any.apply();
                }
                if (!t_dns_qname_5.apply().hit) {
                    t_dns_qname_5_any.apply();
                }
                t_leaf.apply();
                t_leaf_calls.apply();
            }
            if (meta.camus.deliver == 0 || meta.camus.drop == 1) {
                mark_to_drop(standard_metadata);
            }
            // DNS: a standard query for an A record, answered by the switch (bpf/camus_dns.h's rewrite)
            if (meta.camus_dns_qname.answering == 1 && meta.camus_dns_qname.ok == 1 && meta.camus_dns_qname.pos > 1 && hdr.camus_dns_q.isValid() && hdr.camus_dns_q.qtype == 1 && hdr.camus_dns_q.qclass == 1 && hdr.dns.flags[15:11] == 0 && hdr.dns.qdcount == 1 && hdr.ipv4.vihl[7:4] == 4) {
                bit<16> dns_len = 12 + meta.camus_dns_qname.pos + 4 + 16;
                bit<48> mac = hdr.ethernet.dst;
                hdr.ethernet.dst = hdr.ethernet.src;
                hdr.ethernet.src = mac;
                bit<32> addr = hdr.ipv4.src;
                hdr.ipv4.src = hdr.ipv4.dst;
                hdr.ipv4.dst = addr;
                hdr.ipv4.len = 20 + 8 + dns_len;
                hdr.ipv4.ttl = 64;
                hdr.ipv4.frag = 0x4000;   // DF, as resolvers send
                bit<16> port = hdr.udp.sport;
                hdr.udp.sport = hdr.udp.dport;
                hdr.udp.dport = port;
                hdr.udp.len = 8 + dns_len;
                hdr.udp.csum = 0;          // none (allowed over IPv4)
                hdr.dns.flags = 0x8400 | (hdr.dns.flags & 0x0100);   // QR, AA, the client's RD; RCODE 0
                hdr.dns.ancount = 1;
                hdr.dns.nscount = 0;
                hdr.dns.arcount = 0;      // an EDNS record is cut off below
                hdr.camus_dns_rr.setValid();
                hdr.camus_dns_rr.name = 0xc00c;
                hdr.camus_dns_rr.rtype = 1;
                hdr.camus_dns_rr.rclass = 1;
                hdr.camus_dns_rr.ttl = 60;
                hdr.camus_dns_rr.rdlength = 4;
                hdr.camus_dns_rr.addr = meta.camus_dns_qname.answer;
                truncate((bit<32>)(14 + 20 + 8 + dns_len));   // what followed the question goes
                standard_metadata.egress_spec = standard_metadata.ingress_port;
                standard_metadata.mcast_grp = 0;
                meta.camus.deliver = 1;
                meta.camus.call_id = 0;
            }
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

    // no header field egress can read: no port filters

    apply {
        // no port filters
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
        packet.emit(hdr.dns);
        packet.emit(hdr.camus_qname);
        packet.emit(hdr.camus_dns_q);
        packet.emit(hdr.camus_dns_rr);
    }
}

V1Switch(CamusParser(), CamusVerifyChecksum(), CamusIngress(), CamusEgress(),
         CamusComputeChecksum(), CamusDeparser()) main;
