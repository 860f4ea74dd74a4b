"""Who sends what in one step of own tensor parallelism, drawn from comm's records (docs/tp.md shows it;
a test re-draws it from a real step and compares).

    text = who_sends_what(records, {act_bytes: "A", ...})

`records` are comm records of one step on one rank (dicts with phase, op, tag, bytes), in program order.
Each line is one collective: the pass, the operator it implements (f or g of a TP region, their sequence-
parallel forms, the loss's reductions, SP's gradient sum, the norm), the op, the module's tag and the
payload, named by `symbols` (bytes -> a name such as "A" = one b x s x h activation) where it has one.
Every rank of the TP group sends the same: the collectives are symmetric.
"""
from __future__ import annotations

from shardlab.model import anatomy

_REGION = anatomy.tp_region_tags()  # ("tp.wte", "tp.lm_head", "tp.blocks.")
# (op, phase) -> the operator a region collective implements
# (op, phase) -> the operator a region collective implements (in the backward pass: its transpose's)
_ROLE = {("all_reduce", "forward"): "g", ("all_reduce", "backward"): "f",
         ("all_gather", "forward"): "f (SP)", ("reduce_scatter", "backward"): "f (SP)",
         ("reduce_scatter", "forward"): "g (SP)", ("all_gather", "backward"): "g (SP)"}


def role(rec: dict) -> str:
    tag = rec["tag"]
    if tag.startswith(_REGION):
        return _ROLE.get((rec["op"], rec["phase"]), "?")
    if tag.startswith("tp.loss"):
        return "loss " + tag.rsplit(".", 1)[-1]
    if tag == "tp.sp_grads":
        return "SP grads"
    if tag == "grad_norm":
        return "norm"
    return "-"


def who_sends_what(records: list[dict], symbols: dict[int, str]) -> str:
    rows = [("pass", "operator", "op", "module", "payload")]
    for r in records:
        if r["bytes"] == 0:  # control messages (object exchanges, barriers)
            continue
        rows.append((r["phase"], role(r), r["op"], r["tag"].removeprefix("tp.") or "-",
                     symbols.get(r["bytes"], f"{r['bytes']} B")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
