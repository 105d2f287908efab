// A Camus-style spec over the standard headers alone: no header declarations and no header stack,
// only pragmas naming fields of IPv4 and UDP (their real layouts: compiler/language/builtin_headers.py).
// Every data plane's parser finds Ethernet, IPv4 and UDP by itself, so the XDP hosts run it too:
// one classification per packet (there is no message header).
@pragma query_field_exact(ipv4.dstAddr)
@pragma query_field(ipv4.ttl)
@pragma query_field(ipv4.diffserv)
@pragma query_field_exact(udp.dstPort)
@pragma query_field(udp.srcPort)
