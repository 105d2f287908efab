header_type ethernet_t { fields { dst : 48; src : 48; ether_type : 16; } }
header_type ipv4_t { fields { vihl : 8; tos : 8; len : 16; id : 16; frag : 16; ttl : 8; proto : 8; csum : 16; src : 32; dst : 32; } }
header_type udp_t { fields { sport : 16; dport : 16; len : 16; csum : 16; } }
header_type itch_t { fields { stock : 64; price : 32; } }
header ethernet_t ethernet;
header ipv4_t ipv4;
header udp_t udp;
header itch_t itch;
parser start { extract(ethernet); return select(latest.ether_type) { 0x0800 : parse_ipv4; default : ingress; } }
parser parse_ipv4 { extract(ipv4); return ingress; }
action dec_ttl() { modify_field(ipv4.ttl, ipv4.ttl - 1); add_to_field(ipv4.csum, -1); }
table t { reads { ipv4.dst : lpm; } actions { dec_ttl; } size : 1024; }
control ingress { if (valid(ipv4) and ipv4.ttl > 1) { apply(t); } }
@pragma query_field(itch.price)
