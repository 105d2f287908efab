"""Drives a P4Runtime switch with finsy (run in its own virtualenv; see
tests/controller/test_p4rt_conformance.py): arbitration as primary and as backup, writes with
each atomicity, reads with the specification's filters; prints what it saw as one JSON object.

    python finsy_client.py ADDRESS P4INFO DEVICE_CONFIG ELECTION_ID
"""
import asyncio
import json
import re
import sys
from pathlib import Path

import finsy as fy
from finsy.proto import p4r


def price(state, lo, hi, prio, nxt=None):
    """An entry of the range table (without `nxt`: its key alone, a read filter)."""
    return fy.P4TableEntry("t_add_order_price", match=fy.P4TableMatch({"meta.state": state,
                                                                      "add_order.price": f"{lo}...{hi}"}),
                           action=fy.P4TableAction("set_state", next=nxt) if nxt is not None else None,
                           priority=prio)


async def nexts(sw, entity):
    return sorted([e.action.args["next"] async for e in sw.read(entity)])


async def raw_write(sw, entries, atomicity):
    """A WriteRequest with an atomicity finsy's write() does not set: through its own client."""
    req = p4r.WriteRequest(device_id=sw.device_id, election_id=p4r.Uint128(high=0, low=sw.election_id),
                           atomicity=atomicity,
                           updates=[p4r.Update(type=p4r.Update.INSERT, entity=e.encode(sw.p4info)) for e in entries])
    try:
        await sw._p4client.request(req)
        return "OK"
    except Exception as exc:            # finsy's P4ClientError: the status and each update's error
        codes = re.findall(r"canonical_code=GRPCStatusCode\.(\w+)", str(exc))
        return " ".join(codes) if codes else str(exc)


async def main():
    address, p4info, config, election = sys.argv[1:5]
    out = {}
    opts = fy.SwitchOptions(p4info=Path(p4info), p4blob=Path(config), initial_election_id=int(election))
    async with fy.Switch("sw", address, opts) as sw:
        out["primary"] = sw.is_primary
        await sw.write([+price(7, 10, 20, 5, 1), +price(7, 10, 20, 9, 2), +price(8, 10, 20, 5, 4)])
        out["one_key"] = await nexts(sw, price(7, 10, 20, 9))
        out["table_all"] = len([e async for e in sw.read(fy.P4TableEntry("t_add_order_price"))])
        out["all_tables"] = len([e async for e in sw.read(fy.P4TableEntry())])
        # all or none: one bad update (a duplicate) and the good one beside it is not kept
        out["rollback"] = await raw_write(sw, [price(9, 1, 2, 5, 1), price(7, 10, 20, 5, 1)],
                                          p4r.WriteRequest.ROLLBACK_ON_ERROR)
        out["rollback_kept"] = await nexts(sw, fy.P4TableEntry("t_add_order_price",
                                                               match=fy.P4TableMatch({"meta.state": 9,
                                                                                      "add_order.price": "1...2"})))
        out["atomic"] = await raw_write(sw, [price(9, 1, 2, 5, 1), price(9, 3, 4, 5, 2)],
                                        p4r.WriteRequest.DATAPLANE_ATOMIC)
        out["atomic_kept"] = len([e async for e in sw.read(fy.P4TableEntry("t_add_order_price"))])
        await sw.write([+fy.P4MulticastGroupEntry(7, replicas=[(3, 1), (4, 1)])])
        out["group"] = [sorted(r.port if hasattr(r, "port") else r[0] for r in g.replicas)
                        async for g in sw.read(fy.P4MulticastGroupEntry(7))]
        # a backup beside the primary: it reads, its writes are refused
        backup = fy.Switch("backup", address, opts(initial_election_id=int(election) - 1, p4force=False))
        async with backup:
            out["backup_primary"] = backup.is_primary
            out["backup_reads"] = len([e async for e in backup.read(fy.P4TableEntry("t_add_order_price"))])
            try:
                await backup.write([+price(9, 5, 6, 5, 1)])
                out["backup_write"] = "accepted"
            except Exception as exc:
                out["backup_write"] = re.search(r"code=GRPCStatusCode\.(\w+)", str(exc)).group(1)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    asyncio.run(main())
