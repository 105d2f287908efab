"""A shared MQTT corpus and a paho-mqtt harness: the same subscriptions and publications run
against any MQTT broker, the deliveries each subscriber saw come back as sets."""
from __future__ import annotations

import random
import threading
import time

import paho.mqtt.client as paho

LEVELS = ["plant", "7", "temp", "office", "", "$SYS", "a"]


def corpus(seed: int, subscribers: int = 10, publications: int = 80) -> tuple[list[list[str]], list[str]]:
    rng = random.Random(seed)

    def level(first: bool) -> str:
        return rng.choice(LEVELS if first else [lv for lv in LEVELS if lv != "$SYS"])

    def flt() -> str:
        parts = [rng.choice(["+", level(i == 0)]) for i in range(rng.randint(1, 4))]
        if rng.random() < 0.35:
            parts = parts[:rng.randint(0, len(parts))] + ["#"]
        return "/".join(parts) or "#"

    def topic() -> str:
        return "/".join(level(i == 0) for i in range(rng.randint(1, 5))) or "plant"

    subs = [sorted({flt() for _ in range(rng.randint(1, 3))}) for _ in range(subscribers)]
    return subs, [topic() for _ in range(publications)]


def run_corpus(host: str, port: int, subs: list[list[str]], pubs: list[str],
               quiet_s: float = 0.6) -> list[set[tuple[str, bytes]]]:
    """Subscribe every subscriber (waiting for each SUBACK), publish everything in order at QoS
    0, then collect until nothing arrives for `quiet_s`."""
    got: list[set[tuple[str, bytes]]] = [set() for _ in subs]
    last = [time.monotonic()]
    clients = []
    for i, filters in enumerate(subs):
        acked = threading.Event()
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"sub{i}", protocol=paho.MQTTv311)

        def on_message(_c, _u, m, i=i) -> None:
            got[i].add((m.topic, m.payload))
            last[0] = time.monotonic()
        c.on_message = on_message
        c.on_subscribe = lambda *_a, acked=acked: acked.set()
        c.connect(host, port)
        c.loop_start()
        c.subscribe([(f, 0) for f in filters])
        if not acked.wait(10):
            raise TimeoutError(f"no SUBACK for {filters}")
        clients.append(c)
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="pub", protocol=paho.MQTTv311)
    pub.connect(host, port)
    pub.loop_start()
    for k, t in enumerate(pubs):
        pub.publish(t, f"{k}".encode(), qos=0).wait_for_publish(5)
    last[0] = time.monotonic()
    while time.monotonic() - last[0] < quiet_s:
        time.sleep(0.05)
    for c in clients + [pub]:
        c.disconnect()                 # first: it wakes the network thread loop_stop joins
    for c in clients + [pub]:
        c.loop_stop()
    return got


def run_retained(host: str, port: int, subs: list[list[str]], pubs: list[str],
                 quiet_s: float = 0.6) -> list[set[tuple[str, bytes, bool]]]:
    """Publish to every topic of `pubs` retained, in order (QoS 1: acknowledged, so stored
    before anyone subscribes; every fourth payload empty, which clears what the topic held),
    then subscribe each subscriber and collect what it gets: (topic, payload, retain flag).
    Clears every topic's retained message afterwards."""
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="pub-retained", protocol=paho.MQTTv311)
    pub.connect(host, port)
    pub.loop_start()
    for k, t in enumerate(pubs):
        pub.publish(t, b"" if k % 4 == 3 else f"r{k}".encode(), qos=1, retain=True).wait_for_publish(5)
    got: list[set[tuple[str, bytes, bool]]] = [set() for _ in subs]
    last = [time.monotonic()]
    clients = []
    for i, filters in enumerate(subs):
        acked = threading.Event()
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"rsub{i}", protocol=paho.MQTTv311)

        def on_message(_c, _u, m, i=i) -> None:
            got[i].add((m.topic, m.payload, bool(m.retain)))
            last[0] = time.monotonic()
        c.on_message = on_message
        c.on_subscribe = lambda *_a, acked=acked: acked.set()
        c.connect(host, port)
        c.loop_start()
        c.subscribe([(f, 0) for f in filters])
        if not acked.wait(10):
            raise TimeoutError(f"no SUBACK for {filters}")
        clients.append(c)
    last[0] = time.monotonic()
    while time.monotonic() - last[0] < quiet_s:
        time.sleep(0.05)
    for c in clients:
        c.disconnect()
    for c in clients:
        c.loop_stop()
    for t in sorted(set(pubs)):
        pub.publish(t, b"", qos=1, retain=True).wait_for_publish(5)
    pub.disconnect()
    pub.loop_stop()
    return got
