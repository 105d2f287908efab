"""TLS on the channels between machines: the subscription API, the host agents' API, P4Runtime.

Each party has a certificate and its private key (PEM files) signed by a CA the others trust.
The controller is a server to subscribers and a client to agents and switches; it presents the
same certificate both ways. Mutual TLS (the client shows a certificate too) is what keeps the
tables safe: an agent takes pushes only from a client whose verified certificate names the
controller, and a switch started with a client CA takes P4Runtime only from certificates that
CA signed. `make_pki` writes a private CA and certificates for a lab or a first deployment;
any PKI's PEM files work the same.

Every file problem is a TlsError naming the option and the file: missing, not PEM, a key that
is not the certificate's.
"""
from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("camus.tls")


class TlsError(ValueError):
    pass


@dataclass(frozen=True)
class TlsFiles:
    """One party's credentials: its certificate and key, and the CA it trusts (each optional:
    a client that only verifies the server needs the CA alone)."""
    cert: str | None = None
    key: str | None = None
    ca: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise TlsError("give both a certificate and its key (--tls-cert and --tls-key), or neither")
        for what, path in (("certificate", self.cert), ("key", self.key), ("CA certificate", self.ca)):
            if path is not None and not Path(path).is_file():
                raise TlsError(f"{what} {path}: no such file")

    @property
    def enabled(self) -> bool:
        return self.cert is not None or self.ca is not None


def _load_chain(ctx: ssl.SSLContext, files: TlsFiles) -> None:
    assert files.cert is not None and files.key is not None
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            raise TlsError(f"{files.key} is not the private key of {files.cert}") from None
        raise TlsError(f"{files.cert} / {files.key}: not a PEM certificate and key ({exc.reason or exc})") from None


def _load_ca(ctx: ssl.SSLContext, ca: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except ssl.SSLError as exc:
        raise TlsError(f"CA certificate {ca}: not a PEM certificate ({exc.reason or exc})") from None


class HandshakeFailures:
    """Failed TLS handshakes on this process's servers (the controller's API, a host agent's)."""
    count = 0


def _peer() -> str:
    """The client of the handshake under way: asyncio's SSL protocol (the caller of
    do_handshake) knows its transport; best effort, "?" when it cannot be found."""
    try:
        proto = sys._getframe(2).f_locals.get("self")
        name = proto._transport.get_extra_info("peername")            # type: ignore[union-attr]
        return str(name[0]) if isinstance(name, tuple) else str(name or "?")
    except Exception:
        return "?"


def _side(reason: str) -> str:
    """Who refused: an alert is the client's word on our certificate; the rest is ours."""
    if "ALERT" in reason:
        return "the client refused this server"
    if reason in ("HTTP_REQUEST", "WRONG_VERSION_NUMBER", "UNSUPPORTED_PROTOCOL"):
        return "the client does not speak TLS (or an old version)"
    return "this server refused the client"


class _LoggedHandshake(ssl.SSLObject):
    """A server's TLS connection that logs and counts a failed handshake: asyncio (under
    aiohttp) logs those only in debug mode, so a client without a certificate, with one from
    another CA, or speaking plain HTTP left no trace."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            HandshakeFailures.count += 1
            reason = exc.reason or type(exc).__name__
            log.warning("TLS handshake with %s failed: %s (%s)", _peer(), _side(reason), reason)
            raise


def server_context(files: TlsFiles, require_client: bool = False) -> ssl.SSLContext:
    """A server's context: its certificate; with `require_client`, clients must present a
    certificate the CA (`files.ca`) signed. Failed handshakes are logged and counted
    (HandshakeFailures)."""
    if files.cert is None:
        raise TlsError("a TLS server needs its certificate and key (--tls-cert, --tls-key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.sslobject_class = _LoggedHandshake
    _load_chain(ctx, files)
    if require_client:
        if files.ca is None:
            raise TlsError("requiring client certificates needs the CA that signs them (--tls-ca)")
        _load_ca(ctx, files.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """A client's context: servers verified against `files.ca` (the system's CAs without one);
    its own certificate presented when it has one (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)          # verifies the server and its host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.ca:
        _load_ca(ctx, files.ca)
    else:
        ctx.load_default_certs()
    if files.cert is not None:
        _load_chain(ctx, files)
    return ctx


def peer_names(peercert: dict | None) -> set[str]:
    """The names a verified peer certificate carries: its common name and DNS alt names."""
    if not peercert:
        return set()
    names = {v for rdn in peercert.get("subject", ()) for k, v in rdn if k == "commonName"}
    names |= {v for k, v in peercert.get("subjectAltName", ()) if k == "DNS"}
    return names


def explain_failure(exc: BaseException, url: str) -> str | None:
    """A clear sentence for the TLS failures a client meets, or None when it is not one."""
    text = str(exc)
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        text = f"{text} {reason}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (f"{url}: the server's certificate is not trusted ({text.split('certificate verify failed:')[-1].strip(' )>')}): "
                "give the CA that signed it (--ca)")
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return f"{url}: the server does not speak TLS there: use http:// (or the server's TLS port)"
    if any(s in text for s in ("RemoteDisconnected", "Remote end closed", "BadStatusLine", "Connection reset")):
        if url.startswith("http://"):
            return (f"{url}: the server closed the connection without an HTTP answer: if it serves TLS, use "
                    "https:// and its CA (--ca)")
    if "CERTIFICATE_REQUIRED" in text or "certificate required" in text or "SSLV3_ALERT_BAD_CERTIFICATE" in text:
        return f"{url}: the server wants a client certificate its CA signed (--cert, --key)"
    return None


# -- a private CA for a lab or a first deployment -------------------------------------------

def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def make_pki(directory: str | Path, parties: dict[str, list[str]], days: int = 825) -> dict[str, TlsFiles]:
    """A private CA (`ca.crt`, `ca.key`) and, per party, `NAME.crt` + `NAME.key` signed by it,
    each naming the party (common name and DNS name) and the extra names or IP addresses given
    (where clients reach it). Keys are ECDSA P-256, written 0600. Returns each party's files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    pem = serialization.Encoding.PEM
    no_pass = serialization.NoEncryption()
    fmt = serialization.PrivateFormat.PKCS8

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "camus-xdp private CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (out / "ca.crt").write_bytes(ca.public_bytes(pem))
    _write_private(out / "ca.key", ca_key.private_bytes(pem, fmt, no_pass))
    made = {}
    for name, extra in parties.items():
        key = ec.generate_private_key(ec.SECP256R1())
        alt: list[x509.GeneralName] = [x509.DNSName(name)]
        for e in extra:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(e)))
            except ValueError:
                alt.append(x509.DNSName(e))
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (out / f"{name}.crt").write_bytes(cert.public_bytes(pem))
        _write_private(out / f"{name}.key", key.private_bytes(pem, fmt, no_pass))
        made[name] = TlsFiles(str(out / f"{name}.crt"), str(out / f"{name}.key"), str(out / "ca.crt"))
    return made


# -- gRPC (P4Runtime) ------------------------------------------------------------------------

def grpc_server_credentials(files: TlsFiles, require_client: bool = False):   # type: ignore[no-untyped-def]
    """A P4Runtime server's credentials; with `require_client`, only clients whose certificate
    the CA signed are served (mutual TLS)."""
    import grpc
    if files.cert is None or files.key is None:
        raise TlsError("a TLS P4Runtime server needs its certificate and key (--tls-cert, --tls-key)")
    server_context(files, require_client)                 # the same checks, the same errors
    ca = Path(files.ca).read_bytes() if require_client and files.ca else None
    return grpc.ssl_server_credentials([(Path(files.key).read_bytes(), Path(files.cert).read_bytes())],
                                       root_certificates=ca, require_client_auth=require_client)


def grpc_channel_credentials(files: TlsFiles):   # type: ignore[no-untyped-def]
    """A P4Runtime client's credentials: the switch verified against the CA, our certificate
    shown when we have one."""
    import grpc
    client_context(files)                                 # the same checks, the same errors
    return grpc.ssl_channel_credentials(
        root_certificates=Path(files.ca).read_bytes() if files.ca else None,
        private_key=Path(files.key).read_bytes() if files.key else None,
        certificate_chain=Path(files.cert).read_bytes() if files.cert else None)
