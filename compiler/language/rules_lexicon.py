"""The rule language's words: its tokens, keywords, relation operators, numbers and address
literals, shared by the general parser (rules_parser.py) and the one-regex fast path
(rules_fast.py), which must read every constant exactly as the general parser does."""
from __future__ import annotations

import ipaddress
import re

TOKEN = re.compile(r"""
   (?P<ws>[ \t\r]+|\#[^\n]*)
 | (?P<nl>\n)
 | (?P<mac>(?=[0-9a-fA-F]{2}:)[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}(?![\w:]))
 | (?P<ipv6>(?=[0-9a-fA-F]{0,4}:)(?:[0-9a-fA-F]{0,4}:){2,7}(?:[0-9a-fA-F]{1,4}|\d+\.\d+\.\d+\.\d+)?(?![\w:]))
 | (?P<ipv4>\d+\.\d+\.\d+\.\d+)
 | (?P<num>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d+)?)
 | (?P<str>"[^"\n]*"|'[^'\n]*')
 | (?P<id>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
 | (?P<op>==|!=|<=|>=|&&|\|\||[=<>!():,;/])
 | (?P<bad>.)
""", re.VERBOSE)

# The same tokens for text with no address in it (no '.', no ':' but the rule's own): the
# address alternatives, tried at every identifier and number, were half of the general parser's time
PLAIN_TOKEN = re.compile(r"""
   (?P<ws>[ \t\r]+|\#[^\n]*)
 | (?P<nl>\n)
 | (?P<num>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*)
 | (?P<str>"[^"\n]*"|'[^'\n]*')
 | (?P<id>[A-Za-z_]\w*)
 | (?P<op>==|!=|<=|>=|&&|\|\||[=<>!():,;/])
 | (?P<bad>.)
""", re.VERBOSE)

RELOPS = {"==": "==", "=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=",
           "prefix": "prefix"}
STATE_FNS = {"count", "sum", "avg"}
KEYWORDS = {"and", "or", "not", "true", "prefix"}


def parse_int(text: str) -> int:
    """Decimal (leading zeros allowed), 0x hex or 0b binary, with optional '_' separators."""
    t = text.replace("_", "")
    if len(t) > 1 and t[0] == "0" and t[1] in "xXbB":
        return int(t, 0)
    return int(t, 10)


ADDRESS_NAMES = {"mac": "MAC", "ipv6": "IPv6", "ipv4": "IPv4"}
ADDRESS_KINDS = tuple(ADDRESS_NAMES)


def address_value(kind: str, text: str) -> int:
    """An address token's value (ValueError: not an address, e.g. an IPv4 byte over 255)."""
    if kind == "ipv4":
        return int(ipaddress.IPv4Address(text))
    if kind == "ipv6":
        return int(ipaddress.IPv6Address(text))
    return int(text.replace(":", ""), 16)
