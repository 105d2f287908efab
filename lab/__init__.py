"""Test and benchmark equipment, not what runs on a production host: the namespace lab
(namespaces.py: veths, namespaces, the lab's processes and the demo's topology), its traffic
(traffic.py: feeds and captures) and runs of the pinned XDP program on crafted packets
(pinned_run.py)."""
