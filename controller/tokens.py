"""Bearer tokens of the subscription API, kept only as salted hashes.

A tokens file maps tokens to hosts, one `TOKEN: host` line each; TOKEN may be written in the
clear (hashed when loaded: the clear text is never kept in memory) or as `sha256$SALT$HEX`
(`camus-xdp controller hash-token` prints such a line), so the file itself need not hold a
secret. A lookup hashes the presented token with every entry's salt and compares all of them
in constant time, without stopping at the first match: how long it takes says nothing about
which token, or how much of one, was right. A token found is remembered by a keyed hash (a key
of this process's, never written anywhere), so the next request with it costs one hash, not one
per entry: a thousand changes a second from 32 clients spent a tenth of the API's time here.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path


KNOWN_TOKENS = 4096          # valid tokens remembered (forgotten all at once past it)


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


def _entries(entries: dict[str, str]) -> list[_Entry]:
    out = []
    for token, host in entries.items():
        if token.startswith("sha256$"):
            try:
                _, salt_hex, hexd = token.split("$")
                out.append(_Entry(bytes.fromhex(salt_hex), bytes.fromhex(hexd), host))
            except ValueError:
                raise ValueError("a hashed token must read sha256$SALT$HEX (hex digits)") from None
        else:
            fresh = os.urandom(16)
            out.append(_Entry(fresh, _digest(fresh, token), host))
    return out


class TokenBook:
    def __init__(self, entries: dict[str, str], path: Path | None = None) -> None:
        """`entries`: token (clear or sha256$SALT$HEX) -> host. `path`: the file they came from,
        read again by `refresh` when it changes (tokens rotate without a restart)."""
        self._entries = _entries(entries)
        self.path = path
        self._stamp = _stamp(path) if path is not None else None
        self._key = os.urandom(32)
        self._known: dict[bytes, tuple[str, str]] = {}   # keyed hash of a valid token -> who()

    def __len__(self) -> int:
        return len(self._entries)

    def host(self, token: str) -> str | None:
        found = self.who(token)
        return found[0] if found else None

    def who(self, token: str) -> tuple[str, str] | None:
        """(host, the token's fingerprint) for `token`, or None; a token not remembered is
        compared with every entry, in constant time (a remembered one answers from its keyed
        hash: being faster says only that the presented token is valid, which the answer says
        anyway). The fingerprint (8 hex digits of its salted hash) names the token in the audit
        log without revealing it."""
        mark = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), key=self._key, digest_size=32).digest()
        known = self._known.get(mark)
        if known is not None:
            return known
        found: tuple[str, str] | None = None
        for e in self._entries:
            if hmac.compare_digest(_digest(e.salt, token), e.digest):
                found = (e.host, e.digest.hex()[:8])
        if found is not None:
            if len(self._known) >= KNOWN_TOKENS:
                self._known.clear()
            self._known[mark] = found
        return found

    def refresh(self) -> str:
        """Re-read the tokens file when it changed since it was read: tokens added, removed or
        moved to another host take effect at once. A file that does not parse (say, half
        written) leaves the tokens in force. Returns what happened ("" when nothing changed)."""
        if self.path is None:
            return ""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return ""
        self._stamp = stamp
        try:
            self._entries = _entries(_read(self.path))
            self._known.clear()                         # a removed or moved token is looked up again
        except (OSError, ValueError) as exc:
            return f"{self.path} changed but was not taken ({exc}); the {len(self)} tokens before stay in force"
        return f"{self.path} re-read: {len(self)} tokens"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _read(path: Path) -> dict[str, str]:
    import yaml
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path}: expected 'token: host' lines")
    return {str(k): str(v) for k, v in data.items()}


def load_tokens(path: str | Path) -> TokenBook:
    """The tokens of a file, re-read by `TokenBook.refresh` when it changes."""
    return TokenBook(_read(Path(path)), Path(path))
