"""The edge broker's bounds and gates with real clients: memory under partial-publish and
retained-message floods stays under the configured limits while other clients are served;
mosquitto's password and ACL files; MQTT over TLS (mosquitto_sub --cafile)."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from camus.edge import mqtt
from camus.edge.auth import Acl, AuthFileError, Passwords, covers, hash_password
from camus.edge.session import Limits
from tests.edge.edge_server import RawClient, connect_packet, on_loop, running, topics_broker
from tests.edge.test_mqtt_sessions import WAIT, Paho

MiB = 1 << 20


def _rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _retain_many(b, port: int, n: int, size: int) -> RawClient:  # type: ignore[no-untyped-def]
    """`n` retained messages of `size` bytes on plant/0... from one client (returned, open),
    once the broker holds them all."""
    pub = RawClient(port)
    pub.send(connect_packet("retainer"))
    assert pub.packet().kind == mqtt.CONNACK
    blob = b"r" * size
    for k in range(0, n, 1000):
        pub.send(b"".join(mqtt.publish_packet(f"plant/{i}", blob, retain=True) for i in range(k, min(k + 1000, n))))
    deadline = time.monotonic() + 4 * WAIT
    while len(b.retained) < n:
        assert time.monotonic() < deadline, len(b.retained)
        time.sleep(0.05)
    return pub


def test_partial_publications_cannot_grow_the_broker_past_its_bound() -> None:
    """Clients each send CONNECT and most of a 1 MiB PUBLISH, then nothing: unfinished packets
    of all of them stay under --max-buffered (the connection that would pass it is closed),
    and a well-behaved client is served all along."""
    limits = Limits(max_packet=2 * MiB, max_buffered=8 * MiB)
    b = topics_broker(limits=limits)
    with running(b) as port:
        reader = Paho(port, "reader")
        reader.subscribe(("plant/#", 0))
        before = _rss_mb()
        slow = []
        body = mqtt.encode_string("plant/big") + b"x" * MiB
        whole = mqtt.client_packet(mqtt.PUBLISH, body)
        for k in range(40):                           # 40 MiB offered
            c = RawClient(port)
            c.send(connect_packet(f"slow{k}"))
            assert c.packet().kind == mqtt.CONNACK
            try:
                c.send(whole[:-10])                   # never finished
            except OSError:
                pass                                  # closed by the broker meanwhile
            slow.append(c)
        deadline = time.monotonic() + WAIT
        while b.stats.over_memory < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.stats.over_memory >= 30              # about 8 held, the rest closed
        assert on_loop(port, lambda: b.buffered) <= limits.max_buffered
        writer = Paho(port, "writer")
        writer.publish("plant/1", b"still served", 1)
        assert reader.next() == ("plant/1", b"still served", 0, False)
        assert _rss_mb() - before < 3 * limits.max_buffered / MiB + 32
        # a packet over --max-packet is refused from its header: nothing of it is kept
        big = RawClient(port)
        big.send(connect_packet("big"))
        assert big.packet().kind == mqtt.CONNACK
        big.send(mqtt.client_packet(mqtt.PUBLISH, mqtt.encode_string("plant/x") + b"y" * (3 * MiB))[:64])
        assert big.packet() is None and b.stats.too_large == 1
        for c in slow:
            c.close()
        for p in (reader, writer):
            p.stop()
        deadline = time.monotonic() + WAIT
        while b.buffered and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.buffered == 0                        # closed connections give their bytes back


def test_stalled_publishers_cannot_starve_a_client_that_is_sending() -> None:
    """The bound full of stalled publishers' unfinished packets: a client sending a large
    publication is served (the oldest stalled connections are closed to make room, not the
    newcomer), and stalled packets are let go after --packet-timeout."""
    limits = Limits(max_packet=2 * MiB, max_buffered=8 * MiB, packet_timeout=3.0)
    b = topics_broker(limits=limits)
    with running(b) as port:
        reader = Paho(port, "reader")
        reader.subscribe(("plant/#", 0))
        whole = mqtt.client_packet(mqtt.PUBLISH, mqtt.encode_string("plant/big") + b"x" * MiB)
        slow = []
        for k in range(8):                            # 8 MiB held: the bound
            c = RawClient(port)
            c.send(connect_packet(f"stalled{k}"))
            assert c.packet().kind == mqtt.CONNACK
            c.send(whole[:-10])
            slow.append(c)
        deadline = time.monotonic() + WAIT
        while b.buffered < 8 * (MiB - 10) and time.monotonic() < deadline:
            time.sleep(0.02)
        writer = Paho(port, "writer")
        payload = b"z" * (3 * MiB // 2)
        writer.publish("plant/1", payload, 1)
        assert reader.next() == ("plant/1", payload, 0, False)
        assert b.stats.over_memory >= 1 and "writer" in b.by_client     # stalled ones went, not the writer
        deadline = time.monotonic() + WAIT
        while b.buffered and time.monotonic() < deadline:           # the rest are let go by the timeout
            time.sleep(0.05)
        assert b.buffered == 0 and b.stats.stalled >= 1, b.stats
        for c in slow:
            c.close()
        for p in (reader, writer):
            p.stop()


def test_retained_messages_to_subscribers_that_do_not_read_are_streamed_under_a_bound() -> None:
    """20K retained messages (40 MiB) and five `#` subscribers that never read: each gets its
    retained messages a chunk at a time as it takes them, so the broker grows by a few chunks,
    not 5 x 40 MiB; a normal client is served meanwhile."""
    b = topics_broker(limits=Limits(max_retained_bytes=256 * MiB))
    with running(b) as port:
        pub = _retain_many(b, port, 20_000, 2048)
        before = _rss_mb()
        stuck = []
        for k in range(5):
            c = RawClient(port)
            c.sock.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 4096)
            c.send(connect_packet(f"hash{k}"))
            assert c.packet().kind == mqtt.CONNACK
            c.send(mqtt.client_packet(mqtt.SUBSCRIBE, b"\x00\x01" + mqtt.encode_string("#") + b"\x00", 2))
            stuck.append(c)                          # never read past the CONNACK
        deadline = time.monotonic() + WAIT           # each is blocked with a full send buffer
        while sum(1 for s in b.sessions.values() if s.client_id.startswith("hash") and s.writer is not None
                  and s.writer.transport.get_write_buffer_size() > 0) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        reader, writer = Paho(port, "reader"), Paho(port, "writer")
        reader.subscribe(("live/#", 0))
        writer.publish("live/1", b"served", 1)
        assert reader.next() == ("live/1", b"served", 0, False)
        assert _rss_mb() - before < 48, _rss_mb() - before        # the whole set for all five: 200 MiB
        for c in stuck:
            c.close()
        pub.close()
        for p in (reader, writer):
            p.stop()


def test_a_flood_of_stalled_publishers_and_hash_subscribers_on_100k_retained_messages() -> None:
    """Both floods at once: 200 connections holding unfinished 256 KiB publications (50 MiB
    offered against a 16 MiB --max-buffered) and five `#` subscribers that never read, on 100K
    retained messages. Unfinished bytes stay under the bound, the broker's memory grows by the
    bound and a few retained chunks, not by what was offered, and a normal client is served
    all along."""
    import socket
    limits = Limits(max_packet=MiB, max_buffered=16 * MiB, max_retained_bytes=64 * MiB)
    b = topics_broker(limits=limits)
    with running(b) as port:
        pub = _retain_many(b, port, 100_000, 200)
        reader, writer = Paho(port, "reader"), Paho(port, "writer")
        reader.subscribe(("live/#", 0))
        before = _rss_mb()
        stuck = []
        for k in range(5):
            c = RawClient(port)
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.send(connect_packet(f"hash{k}"))
            assert c.packet().kind == mqtt.CONNACK
            c.send(mqtt.client_packet(mqtt.SUBSCRIBE, b"\x00\x01" + mqtt.encode_string("#") + b"\x00", 2))
            stuck.append(c)                                   # never read past the CONNACK
        unfinished = mqtt.client_packet(mqtt.PUBLISH, mqtt.encode_string("plant/big") + b"x" * (256 << 10))[:-100]
        for k in range(200):
            c = RawClient(port)
            c.send(connect_packet(f"stalled{k}"))
            assert c.packet().kind == mqtt.CONNACK
            try:
                c.send(unfinished)
            except OSError:
                pass                                          # closed meanwhile to make room
            stuck.append(c)
            assert on_loop(port, lambda: b.buffered) <= limits.max_buffered
            if k % 50 == 49:                                  # served throughout
                writer.publish("live/1", b"%d" % k, 1)
                assert reader.next() == ("live/1", b"%d" % k, 0, False)
        assert b.stats.over_memory >= 100 and on_loop(port, lambda: b.buffered) <= limits.max_buffered
        grown = _rss_mb() - before
        assert grown < 3 * limits.max_buffered / MiB + 48, grown     # offered: 50 MiB + 5 x 20 MiB retained
        for c in stuck:
            c.close()
        pub.close()
        for p in (reader, writer):
            p.stop()


def test_retained_messages_stay_under_their_byte_limit() -> None:
    limits = Limits(max_packet=2 * MiB, max_retained_bytes=8 * MiB)
    b = topics_broker(limits=limits)
    with running(b) as port:
        pub = Paho(port, "pub")
        for k in range(30):                           # 30 MiB of retained messages offered
            pub.publish(f"plant/r{k}", b"r" * MiB, 1, retain=True)
        pub.sync()
        assert b.retained_bytes <= limits.max_retained_bytes and len(b.retained) == 8
        assert b.stats.not_retained == 22
        pub.publish("plant/r0", b"", 0, retain=True)  # clearing one makes room again
        pub.publish("plant/r99", b"small", 0, retain=True)
        pub.sync()
        assert "plant/r99" in b.retained
        sub = Paho(port, "sub")
        sub.subscribe(("plant/r9", 0))                # past the limit: sent on, not kept
        assert sub.nothing_more()
        for p in (pub, sub):
            p.stop()


def test_passwords_and_acls_as_mosquitto_files(tmp_path) -> None:
    pw = tmp_path / "passwd"
    if shutil.which("mosquitto_passwd"):
        subprocess.run(["mosquitto_passwd", "-c", "-b", str(pw), "alice", "s3cret"], check=True)
        subprocess.run(["mosquitto_passwd", "-b", str(pw), "bob", "hunter2"], check=True)
    else:
        pw.write_text(f"alice:{hash_password('s3cret')}\nbob:{hash_password('hunter2')}\n")
    acl = tmp_path / "acl"
    acl.write_text("user alice\ntopic readwrite plant/#\ntopic read public/#\ntopic deny plant/9/temp\n"
                   "user bob\ntopic write public/news\n"
                   "pattern read clients/%u/#\n")
    b = topics_broker(passwords=Passwords(pw), acl=Acl.load(acl))
    with running(b) as port:
        wrong = Paho(port, "w", user="alice", password="nope")
        assert wrong.rc == 134            # CONNACK 4, as paho names it: bad user name or password
        anon = Paho(port, "anon")
        assert anon.rc == 135             # CONNACK 5, not authorized: a password file, no anonymous clients
        alice = Paho(port, "a", user="alice", password="s3cret")
        bob = Paho(port, "b", user="bob", password="hunter2")
        assert (alice.rc, bob.rc) == (0, 0)
        assert alice.subscribe(("plant/+/temp", 0), ("public/#", 1), ("#", 0), ("clients/alice/x", 0),
                               ("clients/bob/x", 0), ("plant/9/temp", 0)) == [0, 1, 0x80, 0, 0x80, 0x80]
        assert bob.subscribe(("plant/#", 0)) == [0x80]
        bob.publish("plant/1/temp", b"not bob's")            # acknowledged (3.1.1), not sent on
        alice.publish("plant/9/temp", b"denied to alice")      # her plant/+/temp matches; the deny rule wins
        bob.publish("public/news", b"hello")
        assert alice.next() == ("public/news", b"hello", 0, False)
        assert alice.nothing_more() and b.stats.denied >= 3
        for p in (alice, bob):
            p.stop()
        for p in (wrong, anon):
            p.c.loop_stop()


def test_auth_files_that_do_not_parse_say_where() -> None:
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".pw") as f:
        f.write("alice:plaintext\n")
        f.flush()
        with pytest.raises(AuthFileError, match=r"\.pw:1: expected user:\$7\$"):
            Passwords(f.name)
    with tempfile.NamedTemporaryFile("w", suffix=".acl") as f:
        f.write("user a\ntopic read x\nallow everything\n")
        f.flush()
        with pytest.raises(AuthFileError, match=r"\.acl:3: expected 'user NAME'"):
            Acl.load(f.name)
    assert covers("a/#", "a/+/c") and covers("+/b", "x/b") and not covers("a/+", "a/#") and not covers("a/b", "a/+")


def test_tls_clients_that_connect_while_the_edge_is_busy_finish_their_handshakes(tmp_path) -> None:
    """A client's ClientHello often arrives with its connection; on a busy edge it arrived
    before the handshake started, was read as MQTT bytes and lost, and the handshake waited for
    it until the 15 s limit (CI: mosquitto_pub over TLS failed with "A TLS error occurred")."""
    import socket
    import ssl
    import threading

    from camus.controller.tls import TlsFiles, make_pki, server_context
    from tests.edge.edge_server import busy
    files = make_pki(tmp_path / "pki", {"edge": ["localhost", "127.0.0.1"]})["edge"]
    b = topics_broker()
    client_ctx = ssl.create_default_context(cafile=str(files.ca))
    done: list[str] = []

    def handshake() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw:
            with client_ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(connect_packet("busy-%d" % threading.get_ident()))
                done.append(tls.version() or "?")
    with running(b, server_context(TlsFiles(files.cert, files.key))) as port:
        busy(port, 1.0)                          # connects and ClientHellos land while it sleeps
        clients = [threading.Thread(target=handshake) for _ in range(8)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(2 * WAIT)
    assert len(done) == 8 and b.stats.tls_failed == 0, (done, b.stats)


def test_mqtt_over_tls_with_mosquitto_clients(tmp_path, caplog) -> None:
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto-clients is not installed (scripts/setup.sh installs them)")
    from camus.controller.tls import TlsFiles, make_pki, server_context
    pki = make_pki(tmp_path / "pki", {"edge": ["localhost", "127.0.0.1"]})
    files = pki["edge"]
    b = topics_broker()
    with running(b, server_context(TlsFiles(files.cert, files.key))) as port:
        sub = subprocess.Popen(["mosquitto_sub", "-h", "localhost", "-p", str(port), "--cafile", str(files.ca),
                                "-t", "plant/#", "-C", "1", "-i", "tls-sub"], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + WAIT
        while "tls-sub" not in b.by_client or not b.by_client["tls-sub"].subs:
            assert time.monotonic() < deadline and sub.poll() is None
            time.sleep(0.02)
        subprocess.run(["mosquitto_pub", "-h", "localhost", "-p", str(port), "--cafile", str(files.ca),
                        "-t", "plant/7", "-m", "over tls"], check=True, timeout=WAIT)
        out, _ = sub.communicate(timeout=WAIT)
        assert out.strip() == "over tls"
        plain = subprocess.run(["mosquitto_pub", "-p", str(port), "-t", "plant/7", "-m", "x"], capture_output=True,
                               timeout=WAIT)
        assert plain.returncode != 0                         # plain MQTT to the TLS port is refused
        # a client that trusts another CA: both failures are counted and logged with the peer
        other = make_pki(tmp_path / "other", {"x": ["localhost"]})["x"]
        wrong = subprocess.run(["mosquitto_pub", "-h", "localhost", "-p", str(port), "--cafile", str(other.ca),
                                "-t", "plant/7", "-m", "x"], capture_output=True, timeout=WAIT)
        assert wrong.returncode != 0
        deadline = time.monotonic() + WAIT
        while b.stats.tls_failed < 2:                         # the server side of each failure
            assert time.monotonic() < deadline, b.stats
            time.sleep(0.02)
    failed = [r.getMessage() for r in caplog.records if "TLS handshake with" in r.getMessage()]
    assert len(failed) == 2 and all("127.0.0.1" in m for m in failed), failed


def test_sys_topics_are_local_retained_and_out_of_reach_of_wildcards() -> None:
    """$SYS/broker/...: a subscriber gets the figures at once (retained) and as they change; a
    `#` subscriber gets none of them (MQTT 4.7.2); a client cannot publish into them; a $SYS
    filter is never pushed to the XDP broker."""
    from tests.edge.test_mqtt_sessions import Recorder
    sink = Recorder()
    b = topics_broker(sink=sink)
    b.port = 1                                     # the edge's rules go to the recorder
    b.sys_interval = 0.2
    with running(b) as port:
        wild = Paho(port, "wild")
        wild.subscribe(("#", 0))
        watcher = Paho(port, "watcher")
        watcher.subscribe(("$SYS/broker/clients/connected", 0))
        topic, value, _, retained = watcher.next()
        assert topic == "$SYS/broker/clients/connected" and int(value) >= 0 and retained
        late = Paho(port, "late")                              # one more client: the figure follows
        deadline = time.monotonic() + WAIT
        while int(value) < 3:
            topic, value, _, _ = watcher.next()
            assert time.monotonic() < deadline
        late.publish("$SYS/broker/clients/connected", b"999", 1)   # dropped, counted
        late.publish("plant/1", b"normal", 1)
        assert wild.next() == ("plant/1", b"normal", 0, False)     # the first thing '#' sees
        assert b.stats.denied == 1 and b.sys_retained["$SYS/broker/clients/connected"][0] != b"999"
        assert "$SYS/broker/clients/connected" in b.filters              # held here ...
        assert sink.sets and "#" in sink.sets[-1] and not any(f.startswith("$SYS") for s in sink.sets for f in s)
        for p in (wild, watcher, late):
            p.stop()
