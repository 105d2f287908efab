"""A small Python client of the subscription service.

    c = SubscriptionClient("http://127.0.0.1:9000", token)
    sub = c.subscribe("stock == GOOGL and price > 50", ttl=30)
    c.keep_alive(sub["id"])          # refresh before the TTL lapses (soft state)
    c.unsubscribe(sub["id"])
"""
from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.error
import urllib.request
from typing import Any

from .tls import TlsFiles, client_context, explain_failure


class ServiceError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


def controller_url(text: str) -> str:
    """The controller's base URL from what a user types: `host:port` or a full http(s) URL
    (`localhost:19000` failed with "unknown url type")."""
    from urllib.parse import urlsplit
    url = text.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"controller {text!r}: expected host:port or an http(s) URL, e.g. 127.0.0.1:9000")
    return url


class ConnectionFailure(OSError):
    """The controller could not be talked to, said in a sentence (TLS trust, the wrong scheme)."""


class SubscriptionClient:
    def __init__(self, url: str, token: str, timeout: float = 10.0, tls: TlsFiles | None = None) -> None:
        """`tls`: the CA that signed the controller's certificate (and a client certificate,
        when the controller asks for one) for an https:// controller."""
        self.url, self.token, self.timeout = controller_url(url), token, timeout
        self._ssl = client_context(tls) if tls is not None and tls.enabled else None
        self._keepers: dict[str, threading.Event] = {}
        self._renamed: dict[str, str] = {}          # original id -> id after a resubscription

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                text = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise ServiceError(exc.code, text) from None
        except (urllib.error.URLError, http.client.HTTPException, ssl.SSLError, ConnectionError) as exc:
            said = explain_failure(exc, self.url)
            if said is None:
                raise
            raise ConnectionFailure(said) from None

    def subscribe(self, filter_text: str, ttl: float = 30.0) -> dict:
        return self._call("POST", "/v1/subscriptions", {"filter": filter_text, "ttl": ttl})

    def refresh(self, sub_id: str, ttl: float | None = None) -> dict:
        return self._call("POST", f"/v1/subscriptions/{sub_id}/refresh", {} if ttl is None else {"ttl": ttl})

    def unsubscribe(self, sub_id: str) -> dict:
        current = self.current_id(sub_id)
        self.stop_keep_alive(sub_id)
        return self._call("DELETE", f"/v1/subscriptions/{current}")

    def current_id(self, sub_id: str) -> str:
        """The id a kept-alive subscription has now (a resubscription gives it a new one)."""
        return self._renamed.get(sub_id, sub_id)

    def subscriptions(self) -> list[dict]:
        return self._call("GET", "/v1/subscriptions")["subscriptions"]

    def wait_installed(self, version: int, timeout: float = 10.0) -> float:
        """Wait until every device the controller pushes to holds the tables of `version` (the
        `version` a subscribe/unsubscribe answered with); returns the seconds waited. The
        controller answers when it is so (`/v1/status?wait_version=`): no polling."""
        import time
        t0 = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - t0)
            ask = max(0.0, min(left, self.timeout / 2))      # well inside the HTTP timeout
            devs = self._call("GET", f"/v1/status?wait_version={int(version)}&timeout={ask:.3f}")["devices"].values()
            if all(d["applied_version"] >= version for d in devs if d["push_target"]):
                return time.monotonic() - t0
            if time.monotonic() - t0 >= timeout:
                raise TimeoutError(f"version {version} not installed within {timeout:g} s")

    def status(self) -> dict:
        return self._call("GET", "/v1/status")

    def verify(self, device: str, timeout: float = 600.0) -> dict:
        """The controller reads `device` back and proves it gives its rules (seconds at 100K)."""
        from urllib.parse import quote
        return self._call("GET", f"/v1/devices/{quote(device, safe='')}/verify", timeout=timeout)

    def keep_alive(self, sub_id: str, every: float | None = None) -> None:
        """Refresh in the background (at a third of the TTL) until unsubscribe/stop_keep_alive.
        A 404 (the subscription lapsed while the controller was away) subscribes again with the
        same filter and TTL; `current_id` follows the new id."""
        sub = next(s for s in self.subscriptions() if s["id"] == sub_id)
        ttl, filter_text = sub["ttl"], sub["filter"]
        stop = threading.Event()
        self._keepers[sub_id] = stop

        def loop() -> None:
            while not stop.wait(every or ttl / 3):
                try:
                    self.refresh(self.current_id(sub_id))
                except ServiceError as exc:
                    if exc.status == 404:
                        try:
                            self._renamed[sub_id] = self.subscribe(filter_text, ttl)["id"]
                        except (ServiceError, OSError):
                            pass
                except OSError:
                    pass

        threading.Thread(target=loop, daemon=True).start()

    def stop_keep_alive(self, sub_id: str) -> None:
        ev = self._keepers.pop(sub_id, None)
        if ev:
            ev.set()
