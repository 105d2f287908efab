"""Drives a P4Runtime switch with p4runtime-shell (run in its own virtualenv; see
tests/controller/test_p4rt_conformance.py): sets the pipeline, writes, reads back with the
specification's filters, and prints what it saw as one JSON object.

    python shell_client.py ADDRESS P4INFO DEVICE_CONFIG ELECTION_ID
"""
import json
import sys

import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeException, P4RuntimeWriteException


def price(state, lo, hi, prio, nxt):
    te = sh.TableEntry("t_add_order_price")(action="set_state")
    te.match["meta.state"] = str(state)
    te.match["add_order.price"] = f"{lo}..{hi}"
    te.priority = prio
    te.action["next"] = str(nxt)
    return te


def key(state, lo, hi, prio=None):
    q = sh.TableEntry("t_add_order_price")
    q.match["meta.state"] = str(state)
    q.match["add_order.price"] = f"{lo}..{hi}"
    if prio is not None:
        q.priority = prio
    return q


def nexts(entries):
    """The next state each entry read sets (set_state's one parameter)."""
    return sorted(int.from_bytes(e.msg().action.action.params[0].value, "big") for e in entries)


def main():
    address, p4info, config, election = sys.argv[1:5]
    out = {}
    sh.setup(device_id=1, grpc_addr=address, election_id=(0, int(election)),
             config=sh.FwdPipeConfig(p4info, config), verbose=False)
    try:
        for e in (price(7, 10, 20, 5, 1), price(7, 10, 20, 9, 2), price(7, 30, 40, 5, 3), price(8, 10, 20, 5, 4)):
            e.insert()
        out["table_all"] = len(list(sh.TableEntry("t_add_order_price").read()))
        out["one_key"] = nexts(key(7, 10, 20, 9).read())
        out["one_key_any_priority"] = nexts(key(7, 10, 20).read())
        out["no_such_key"] = nexts(key(9, 10, 20, 5).read())
        q = sh.TableEntry("t_add_order_price")
        q.priority = 5
        out["priority_filter"] = nexts(q.read())
        try:
            price(7, 10, 20, 5, 1).insert()
            out["duplicate"] = "accepted"
        except P4RuntimeWriteException as exc:
            out["duplicate"] = str(exc)
        m = price(7, 30, 40, 5, 6)
        m.modify()
        out["modified"] = nexts(key(7, 30, 40, 5).read())
        d = sh.TableEntry("t_root")(action="set_state", is_default=True)
        d.action["next"] = "7"
        d.modify()
        out["default"] = nexts(sh.TableEntry("t_root")(is_default=True).read())
        sh.MulticastGroupEntry(5).add(1, 1).add(2, 1).insert()
        out["group"] = [sorted(r.egress_port for r in g.msg().multicast_group_entry.replicas)
                        for g in sh.MulticastGroupEntry(5).read()]
        out["counter_cells"] = len(list(sh.CounterEntry("camus_delivered").read()))
        key(8, 10, 20, 5).delete()
        out["after_delete"] = len(list(sh.TableEntry("t_add_order_price").read()))
        out["api_version"] = sh.client.api_version()
    except (P4RuntimeException, P4RuntimeWriteException) as exc:
        out["error"] = str(exc)
    finally:
        sh.teardown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
