"""What the XDP classifier must do with a packet, computed from the spec and the IR alone.

The kernel tests compare the loaded program with this, packet by packet:
  * not feed traffic (not IP/UDP, another port, fragments, truncated L2-L4) -> XDP_PASS
  * feed traffic whose framing is broken (truncated, lying counts or lengths) -> the malformed
    policy (drop by default); no message of it is delivered
  * IP and UDP lengths that disagree with the frame, or a message count the payload cannot
    hold (two bytes of length prefix each) -> malformed
  * more messages than the program classifies -> XDP_PASS (the host stack handles the whole
    batch; counted as `overflow`)
  * otherwise each message gets its IR verdict; nobody subscribed to any -> XDP_DROP,
    else the packet goes on to replication (XDP_PASS until the forwarding stage lands)
"""
from __future__ import annotations

from dataclasses import dataclass

from camus.compiler.semantics.interpreter import PipelineInterpreter
from camus.compiler.codec.packets import decode_packet
from camus.compiler.ir.pipeline import ActionSet
from camus.compiler.language.spec import Spec


@dataclass
class Expected:
    verdict: str
    category: str                                   # other | malformed | overflow | feed
    messages: dict[int, tuple[int, ActionSet]]      # message position -> (final state, actions)


def expected_verdict(spec: Spec, interp: PipelineInterpreter, data: bytes, max_msgs: int,
                     malformed_pass: bool = False) -> Expected:
    d = decode_packet(spec, data)
    if not d.feed:
        return Expected("XDP_PASS", "other", {})
    if d.error is not None and (d.impossible_count or d.count == 0):
        return Expected("XDP_PASS" if malformed_pass else "XDP_DROP", "malformed", {})
    if spec.framing.kind != "none" and d.count > max_msgs:
        return Expected("XDP_PASS", "overflow", {})
    if d.error is not None:
        return Expected("XDP_PASS" if malformed_pass else "XDP_DROP", "malformed", {})
    msgs: dict[int, tuple[int, ActionSet]] = {}
    deliver = False
    for m in d.messages:
        if not m.subscribable:
            continue
        v = interp.run(m.values)
        msgs[m.index] = (v.final_state, v.actions)
        deliver |= bool(v.actions.ports or v.actions.calls)
    return Expected("XDP_PASS" if deliver else "XDP_DROP", "feed", msgs)


def expected_rule_counts(spec: Spec, rule_lines: list[str], frames: list[bytes]) -> list[tuple[str, int]]:
    """(rule, messages of `frames` it matches), each rule compiled alone: what the per-rule
    counters must say after the frames went through the broker."""
    from camus.compiler.compile import compile_rules
    messages = [m.values for f in frames for m in decode_packet(spec, f).messages]
    out = []
    for line in rule_lines:
        interp = PipelineInterpreter(compile_rules(spec, line).pipeline)
        out.append((line, sum(1 for v in messages if (lambda a: bool(a.ports or a.drop))(interp.run(v).actions))))
    return out
