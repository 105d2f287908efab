// The IPv6 twin of std_ipv4.p4: standard headers named by pragmas only, no declarations and no
// header stack. ipv6.dstAddr is 128 bits (two 64-bit words on the XDP hosts).
@pragma query_field_exact(ipv6.dstAddr)
@pragma query_field(ipv6.hopLimit)
@pragma query_field(ipv6.trafficClass)
@pragma query_field_exact(udp.dstPort)
