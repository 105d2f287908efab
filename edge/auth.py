"""Who may connect to the edge broker, and which topics each may read and write: mosquitto's
own files, so a mosquitto user keeps theirs.

Password file: `user:HASH` lines as `mosquitto_passwd` writes them, `$7$ITER$SALT$HASH`
(PBKDF2-HMAC-SHA512, mosquitto 2.0's default) or `$6$SALT$HASH` (SHA-512 of password and salt,
mosquitto 1.x); clear-text passwords are refused (`hash_password` or mosquitto_passwd makes a
line). ACL file: `topic [read|write|readwrite|deny] FILTER` lines for anonymous clients, then
`user NAME` and that user's `topic` lines, and `pattern ...` lines for everyone with `%u` (user
name) and `%c` (client id) substituted. A client may publish to a topic a `write` rule matches
and no `deny` rule does; it may subscribe to a filter whose every topic a `read` rule covers
unless a `deny` rule covers it too, and it is sent no publication on a topic a `deny` rule
matches (mosquitto's reading: `deny secret/#` refuses a subscription to `secret/x` and keeps
`secret/x` from a `#` subscriber). Without an ACL file every client may do everything.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path

from camus.compiler.language.topics import matches

ITERATIONS = 101                  # mosquitto_passwd's default for $7$


class AuthFileError(ValueError):
    """A password or ACL file that cannot be read: the message names the file and line."""


def hash_password(password: str, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """A `$7$` hash as mosquitto_passwd writes it."""
    salt = salt or os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 64)
    return f"$7${iterations}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


@dataclass(frozen=True)
class _Hash:
    kind: str
    iterations: int
    salt: bytes
    digest: bytes

    def check(self, password: bytes) -> bool:
        if self.kind == "7":
            got = hashlib.pbkdf2_hmac("sha512", password, self.salt, self.iterations, len(self.digest))
        else:
            got = hashlib.sha512(password + self.salt).digest()
        return hmac.compare_digest(got, self.digest)


def _parse_hash(text: str, where: str) -> _Hash:
    parts = text.split("$")
    try:
        if len(parts) == 5 and parts[0] == "" and parts[1] == "7":
            return _Hash("7", int(parts[2]), base64.b64decode(parts[3], validate=True),
                         base64.b64decode(parts[4], validate=True))
        if len(parts) == 4 and parts[0] == "" and parts[1] == "6":
            return _Hash("6", 0, base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True))
    except ValueError:
        raise AuthFileError(f"{where}: the hash is not base64") from None
    raise AuthFileError(f"{where}: expected user:$7$ITER$SALT$HASH or user:$6$SALT$HASH as mosquitto_passwd "
                        "writes them (clear-text passwords are not taken)")


class Passwords:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._users: dict[str, _Hash] = {}
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthFileError(f"{self.path}: {exc}") from None
        for no, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, hashed = line.partition(":")
            if not sep or not user:
                raise AuthFileError(f"{self.path}:{no}: expected user:HASH")
            self._users[user] = _parse_hash(hashed, f"{self.path}:{no}")

    def __len__(self) -> int:
        return len(self._users)

    def check(self, user: str | None, password: bytes | None) -> bool:
        found = self._users.get(user or "")
        if found is None or password is None:
            return False
        return found.check(password)


@dataclass
class _Rule:
    access: str          # read | write | readwrite | deny
    topic: str
    pattern: bool        # %u / %c substituted per client


@dataclass
class Acl:
    path: Path
    anonymous: list[_Rule] = field(default_factory=list)
    users: dict[str, list[_Rule]] = field(default_factory=dict)
    patterns: list[_Rule] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> "Acl":
        acl = cls(Path(path))
        try:
            lines = acl.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthFileError(f"{acl.path}: {exc}") from None
        current = acl.anonymous
        for no, line in enumerate(lines, 1):
            words = line.strip().split(None, 2)
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "user" and len(words) >= 2:
                current = acl.users.setdefault(line.strip()[5:].strip(), [])
            elif words[0] in ("topic", "pattern") and len(words) >= 2:
                access, topic = (words[1], words[2]) if len(words) == 3 and words[1] in (
                    "read", "write", "readwrite", "deny") else ("readwrite", line.strip()[len(words[0]):].strip())
                rule = _Rule(access, topic.strip(), words[0] == "pattern")
                (acl.patterns if rule.pattern else current).append(rule)
            else:
                raise AuthFileError(f"{acl.path}:{no}: expected 'user NAME', 'topic [read|write|readwrite|deny] "
                                    f"FILTER' or 'pattern [...] FILTER', not {line.strip()!r}")
        return acl

    def _rules(self, user: str | None, client_id: str) -> list[_Rule]:
        own = self.users.get(user, []) if user is not None else self.anonymous
        subst = [_Rule(r.access, r.topic.replace("%u", user or "").replace("%c", client_id), True)
                 for r in self.patterns]
        return own + subst

    def may_write(self, user: str | None, client_id: str, topic: str) -> bool:
        rules = self._rules(user, client_id)
        if any(r.access == "deny" and matches("mqtt", r.topic, topic) for r in rules):
            return False
        return any(r.access in ("write", "readwrite") and matches("mqtt", r.topic, topic) for r in rules)

    def may_read(self, user: str | None, client_id: str, flt: str) -> bool:
        """A subscription to `flt` is allowed when a read rule covers every topic it matches
        and no deny rule does."""
        rules = self._rules(user, client_id)
        if any(r.access == "deny" and covers(r.topic, flt) for r in rules):
            return False
        return any(r.access in ("read", "readwrite") and covers(r.topic, flt) for r in rules)

    def denied(self, user: str | None, client_id: str) -> tuple[str, ...]:
        """The deny rules of a client: topics it is sent nothing on, whatever it subscribed."""
        return tuple(r.topic for r in self._rules(user, client_id) if r.access == "deny")


def covers(rule: str, flt: str) -> bool:
    """Does filter `rule` match every topic filter `flt` matches?"""
    rl, fl = rule.split("/"), flt.split("/")
    for i, r in enumerate(rl):
        if r == "#":
            return True
        if i >= len(fl) or fl[i] == "#" or (r != "+" and (fl[i] == "+" or fl[i] != r)):
            return False
    return len(rl) == len(fl)
