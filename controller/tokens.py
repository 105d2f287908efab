"""Bearer tokens of the subscription API, kept only as salted hashes.

A tokens file maps tokens to hosts, one `TOKEN: host` line each; TOKEN may be written in the
clear (hashed when loaded: the clear text is never kept in memory) or as `sha256$SALT$HEX`
(`camus-xdp controller hash-token` prints such a line), so the file itself need not hold a
secret. A lookup hashes the presented token with every entry's salt and compares all of them
in constant time, without stopping at the first match: how long it takes says nothing about
which token, or how much of one, was right.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path


def _digest(salt: bytes, token: str) -> bytes:
    return hashlib.sha256(salt + token.encode("utf-8", "surrogatepass")).digest()


def hash_token(token: str, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    return f"sha256${salt.hex()}${_digest(salt, token).hex()}"


@dataclass(frozen=True)
class _Entry:
    salt: bytes
    digest: bytes
    host: str


class TokenBook:
    def __init__(self, entries: dict[str, str]) -> None:
        """`entries`: token (clear or sha256$SALT$HEX) -> host."""
        self._entries: list[_Entry] = []
        for token, host in entries.items():
            if token.startswith("sha256$"):
                try:
                    _, salt_hex, hexd = token.split("$")
                    self._entries.append(_Entry(bytes.fromhex(salt_hex), bytes.fromhex(hexd), host))
                except ValueError:
                    raise ValueError("a hashed token must read sha256$SALT$HEX (hex digits)") from None
            else:
                fresh = os.urandom(16)
                self._entries.append(_Entry(fresh, _digest(fresh, token), host))

    def __len__(self) -> int:
        return len(self._entries)

    def host(self, token: str) -> str | None:
        """The host of `token`, or None; every entry is compared, in constant time."""
        found: str | None = None
        for e in self._entries:
            if hmac.compare_digest(_digest(e.salt, token), e.digest):
                found = e.host
        return found


def load_tokens(path: str | Path) -> TokenBook:
    import yaml
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: expected 'token: host' lines")
    return TokenBook({str(k): str(v) for k, v in data.items()})
