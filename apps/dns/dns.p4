// DNS answers from the network (the Camus paper's DNS application): queries for names a rule
// answers are answered by the data plane itself (XDP builds the response and sends it back with
// XDP_TX); the resolver host never sees them. Other queries go where the rules say, and a query
// no rule decides goes up to the host's resolver (query_default_action of a custom action).
header ethernet_t { bit<48> dst; bit<48> src; bit<16> ether_type; }
header ipv4_t { bit<8> vihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto; bit<16> csum; bit<32> src; bit<32> dst; }
header udp_t { bit<16> sport; bit<16> dport; bit<16> len; bit<16> csum; }
header dns_t {
    bit<16>  id;
    bit<16>  flags;      // QR, opcode, AA, TC, RD, RA, Z, RCODE
    bit<16>  qdcount;
    bit<16>  ancount;
    bit<16>  nscount;
    bit<16>  arcount;
    bit<512> qname;      // the question's name in wire format: up to 64 bytes, qtype and qclass follow it
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; dns_t dns; }
@pragma udp_port(53)
@pragma query_field(dns.qname)
@pragma query_type(dns.qname, dnsname)
@pragma topic_levels(dns.qname, 6)
@pragma query_action(resolve)      // a custom action: the host's resolver answers
@pragma query_default_action(resolve)
