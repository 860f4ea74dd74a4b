"""Pipeline-parallel generation with request lanes.

The batch is cut into lanes (microbatches of requests), each with its own KV cache on every stage. Work
items run in the same order on every stage: for each step, for each lane. Stage 0 embeds the lane's
prompt (step 0) or its last token, runs its blocks and sends the hidden states on; the last stage picks
the lane's next token and sends it back to stage 0. With one lane a stage idles while the others work
(a decode step is a full round trip); with lanes = stages, stage 0 runs lane 1 while the last stage
finishes lane 0, so every stage is busy (the same reason GPipe uses microbatches in training).

What each stage sends and receives, and in which launches, is data (`program`): one
`batch_isend_irecv` per exchange round (p2p_order.lockstep), typically the lane just computed going
out with the next lane's input coming in. Under NCCL a pair's operations run in issue order and a send
waits for its receive: at two stages, stage 0 sending lane 1's hidden states while stage 1 sends lane
0's token, each as its own launch, would wait on each other forever (gloo forgives it; the checker,
parallel/p2p_order.py, replays `program` under NCCL's rules in the tests). A send is posted right after
the forward that made it, a receive waited for just before the forward that needs it. Every message
goes through comm, tagged "generate.pp.hidden" / "generate.pp.token".
"""
from __future__ import annotations

import torch

from shardlab import comm
from shardlab.generate.sampling import Options, Sampler, left_pad
from shardlab.model.kv_cache import KVCache


def lane_rows(n_rows: int, lanes: int) -> list[list[int]]:
    """Contiguous, near-equal lanes of row indices (fewer lanes when there are fewer rows)."""
    lanes = max(1, min(lanes, n_rows))
    base, extra = divmod(n_rows, lanes)
    out, start = [], 0
    for i in range(lanes):
        size = base + (1 if i < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def _label(what: str, step: int, lane: int, stage: int) -> str:
    """A message's name: the hidden states stage -> stage + 1, or the token of (step, lane)."""
    if what == "hidden":
        return f"hidden {stage}->{stage + 1} step{step} lane{lane}"
    return f"token step{step} lane{lane}"


def tasks(n_stages: int, n_lanes: int, max_new: int) -> dict[int, list]:
    """Every stage's forwards in order, as p2p_order Tasks (what each consumes and makes); stage 0 ends
    with collecting every lane's last token."""
    from shardlab.parallel.p2p_order import Task

    last = n_stages - 1
    out = {}
    for stage in range(n_stages):
        prog = []
        for step in range(max_new):
            for lane in range(n_lanes):
                if stage > 0:
                    needs = ((stage - 1, _label("hidden", step, lane, stage - 1)),)
                else:  # stage 0: the token of the lane's previous step (none at the prompt)
                    needs = ((last, _label("token", step - 1, lane, last)),) if step > 0 else ()
                if stage == last:
                    makes = ((0, _label("token", step, lane, last)),)
                else:
                    makes = ((stage + 1, _label("hidden", step, lane, stage)),)
                prog.append(Task(needs, makes))
        if stage == 0:
            prog.append(Task(tuple((last, _label("token", max_new - 1, lane, last)) for lane in range(n_lanes))))
        out[stage] = prog
    return out


def program(stage: int, n_stages: int, n_lanes: int, max_new: int) -> list[tuple]:
    """This stage's work in order: ("post", msgs) one batch_isend_irecv of p2p_order Msgs, ("run", step,
    lane) a forward of the lane (waiting first for the message it consumes). The batches are
    p2p_order.lockstep's: one per exchange round, safe under NCCL's in-order point-to-point."""
    from shardlab.parallel.p2p_order import lockstep

    before = lockstep(tasks(n_stages, n_lanes, max_new))[stage]
    out = []
    for i, batches in enumerate(before):
        out += [("post", batch) for batch in batches]
        if i < max_new * n_lanes:
            out.append(("run", i // n_lanes, i % n_lanes))
    return out


def pipeline_decode(part, stage: int, n_stages: int, group, prompts: list[list[int]], rows: list[int],
                    opts: Options, last_logits, on_token, device) -> torch.Tensor:
    """Generate `prompts` through the stages; stage 0 returns the (len(prompts), max_new) ids."""
    first, last = stage == 0, stage == n_stages - 1
    d = part.cfg.d_model
    lanes = []
    for idx in lane_rows(len(prompts), opts.lanes or n_stages):
        ids, pad = left_pad([prompts[i] for i in idx], device)
        cache_len = ids.shape[1] + (opts.max_new if opts.use_cache else opts.max_new - 1)
        lanes.append({"idx": idx, "ids": ids, "pad": pad, "seq": ids, "tokens": [],
                      "cache": KVCache(pad, cache_len), "pick": Sampler(opts, [rows[i] for i in idx])})
    inbox, outbox, sends = {}, {}, []  # (what, step, lane) -> (handle, buffer); -> tensor to send; handles

    def forward(lane, x):
        if opts.use_cache:
            return part(x, lane["cache"])
        return part(x, KVCache(lane["pad"], x.shape[1]))  # without the cache: the whole sequence again

    def buffer(what, step, lane):
        b = len(lane["idx"])
        if what == "token":
            return torch.empty(b, dtype=torch.long, device=device)
        t = 1 if (step > 0 and opts.use_cache) else lane["ids"].shape[1] + step
        return torch.empty(b, t, d, device=device)

    def take(key):
        handle, buf = inbox.pop(key)
        handle.wait()
        return buf

    def take_token(lane, step):
        tok = take(("token", step, lanes.index(lane)))
        lane["tokens"].append(tok)
        lane["seq"] = torch.cat([lane["seq"], tok[:, None]], dim=1)
        if on_token is not None and lane is lanes[0]:
            on_token(tok)
        return tok

    for entry in program(stage, n_stages, len(lanes), opts.max_new):
        if entry[0] == "post":
            ops, keys = [], []
            for m in entry[1]:
                what, step, li = _parse(m.what)
                tag = f"generate.pp.{what}"
                if m.kind == "send":
                    ops.append(comm.P2POp(comm.isend, outbox.pop((step, li)), m.peer, group, tag))
                else:
                    ops.append(comm.P2POp(comm.irecv, buffer(what, step, lanes[li]), m.peer, group, tag))
                keys.append((what, step, li))
            for m, key, op, h in zip(entry[1], keys, ops, comm.batch_isend_irecv(ops)):
                if m.kind == "send":
                    sends.append((h, op.tensor))  # the tensor stays referenced until its send is done
                else:
                    inbox[key] = (h, op.tensor)
            continue
        _, step, li = entry
        lane = lanes[li]
        if first:
            if step == 0:
                x = lane["ids"]
            else:
                tok = take_token(lane, step - 1)
                x = tok[:, None] if opts.use_cache else lane["seq"]
        else:
            x = take(("hidden", step, li))
        y = forward(lane, x)
        outbox[(step, li)] = lane["pick"](last_logits(y)) if last else y.contiguous()
    if first:
        for lane in lanes:
            take_token(lane, opts.max_new - 1)
    for handle, _ in sends:
        handle.wait()
    if not first:
        return torch.empty(0, opts.max_new, dtype=torch.long)
    out = torch.empty(len(prompts), opts.max_new, dtype=torch.long)
    for lane in lanes:
        out[lane["idx"]] = torch.stack(lane["tokens"], dim=1).cpu()
    return out


def _parse(label: str) -> tuple[str, int, int]:
    """(what, step, lane) of a message name made by _label."""
    words = label.split()
    return words[0], int(words[-2][len("step"):]), int(words[-1][len("lane"):])


def p2p_plans(n_stages: int, n_lanes: int, max_new: int) -> dict[int, list]:
    """The posting plans `pipeline_decode` runs, for every stage, as the checker's entries."""
    from shardlab.parallel.p2p_order import lockstep_plans

    return lockstep_plans(tasks(n_stages, n_lanes, max_new))
