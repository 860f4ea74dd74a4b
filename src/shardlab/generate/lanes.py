"""Pipeline-parallel generation with request lanes.

The batch is cut into lanes (microbatches of requests), each with its own KV cache on every stage. Work
items run in the same order on every stage: for each step, for each lane. Stage 0 embeds the lane's
prompt (step 0) or its last token, runs its blocks and sends the hidden states on; the last stage picks
the lane's next token and sends it back to stage 0. With one lane a stage idles while the others work
(a decode step is a full round trip); with lanes = stages, stage 0 runs lane 1 while the last stage
finishes lane 0, so every stage is busy (the same reason GPipe uses microbatches in training).

Sends are asynchronous (comm.isend) so that two stages sending to each other at once cannot deadlock;
receives block. Every message goes through comm, tagged "generate.pp.hidden" / "generate.pp.token".
"""
from __future__ import annotations

import torch

from shardlab import comm
from shardlab.generate.engine import Options, Sampler, left_pad
from shardlab.model.kv_cache import KVCache


def split_stage(model, stage: int, n_stages: int):
    """This stage's part of the bare model (blocks balanced by count, embedding first, head last)."""
    from shardlab.parallel.pp.stage import build_stage, stage_ranges

    return build_stage(model, stage, n_stages, stage_ranges(model.cfg.n_layer, n_stages)[stage])


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
    pending = []

    def forward(lane, x):
        if opts.use_cache:
            return part(x, lane["cache"])
        return part(x, KVCache(lane["pad"], x.shape[1]))  # without the cache: the whole sequence again

    def take_token(lane, step):
        tok = torch.empty(len(lane["idx"]), dtype=torch.long, device=device)
        comm.recv(tok, n_stages - 1, group=group, tag="generate.pp.token")
        lane["tokens"].append(tok)
        lane["seq"] = torch.cat([lane["seq"], tok[:, None]], dim=1)
        if on_token is not None and lane is lanes[0]:
            on_token(tok)
        return tok

    for step in range(opts.max_new):
        for lane in lanes:
            b = len(lane["idx"])
            if first:
                if step == 0:
                    x = lane["ids"]
                else:
                    tok = take_token(lane, step - 1)
                    x = tok[:, None] if opts.use_cache else lane["seq"]
            else:
                t = 1 if (step > 0 and opts.use_cache) else lane["ids"].shape[1] + step
                x = torch.empty(b, t, d, device=device)
                comm.recv(x, stage - 1, group=group, tag="generate.pp.hidden")
            y = forward(lane, x)
            if last:
                tok = lane["pick"](last_logits(y))
                pending.append((comm.isend(tok, 0, group=group, tag="generate.pp.token"), tok))
            else:
                y = y.contiguous()
                pending.append((comm.isend(y, stage + 1, group=group, tag="generate.pp.hidden"), y))
    if first:
        for lane in lanes:
            take_token(lane, opts.max_new - 1)
    for handle, _ in pending:
        handle.wait()
    if not first:
        return torch.empty(0, opts.max_new, dtype=torch.long)
    out = torch.empty(len(prompts), opts.max_new, dtype=torch.long)
    for lane in lanes:
        out[lane["idx"]] = torch.stack(lane["tokens"], dim=1).cpu()
    return out
