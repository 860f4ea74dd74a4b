"""Generation under every layout: prefill then decode with a KV cache, greedy or seeded sampling.

    results = generate(model, prompts, Options(max_new=32), Layout(tp=2))   # on every rank

The model is the single-device GPT or Llama; the layout is applied to it from outside, as in training:
- `dp` (parallel.dp_replicate): the prompts are split into contiguous chunks, one per replica; the
  generated tokens are all-gathered to every replica at the end (no traffic per token).
- `tp` (parallel.tp): parallel/tp/own.py's own layers split heads and the MLP; per token one all-reduce after
  the embedding, one per attention and one per MLP (2L + 1), and the vocab-parallel head's logits of the
  last position are all-gathered so every TP rank picks the same token.
- `pp` (parallel.pp): the batch is cut into request lanes, each with its own KV cache per stage
  (`lanes.py`); while the last stage decodes one lane, the first already runs the next.

A mixture-of-experts model generates dropless (model/moe.py's `dropless`: capacity is per chunk of tokens,
so a decode step could not replay the drops of a forward over the whole sequence).

Sampling is reproducible at any layout: row i (the i-th prompt overall) draws from its own generator
seeded by (seed, i), so where a prompt runs does not change what it draws.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch

from shardlab import comm
from shardlab.degrees import Degrees
from shardlab.generate.lanes import lane_rows, pipeline_decode, split_stage
from shardlab.generate.sampling import Options, Sampler, last_logits, left_pad
from shardlab.model.kv_cache import KVCache, nbytes as kv_nbytes
from shardlab.model.moe import dropless


def Layout(tp: int = 1, pp: int = 1, dp: int = 1) -> Degrees:
    """The generator's layout: `dp` replicas, each serving its own prompts, of `pp` stages of `tp` ranks
    (the one layout type, shardlab/degrees.py; generation has no sharded optimizer state: dp replicates)."""
    return Degrees(dp_replicate=dp, tp=tp, pp=pp)


@dataclass
class Stats:
    """What rank 0 measured: time to first token, per-token latency after it, tokens/s over the whole
    call (every prompt's tokens over the wall time), and this rank's comm bytes by op while generating."""
    ttft_s: float = 0.0
    per_token_s: float = 0.0
    tokens_per_s: float = 0.0
    tokens: int = 0  # every prompt's
    local_tokens: int = 0  # this replica's (what its comm bytes were spent on)
    wall_s: float = 0.0
    kv_bytes: int = 0
    comm_bytes: dict = field(default_factory=dict)


def kv_cache_bytes(cfg, layout: Layout, prompts: list[list[int]], max_new: int, elem_bytes: int = 4) -> int:
    """The KV cache one rank allocates (the largest): its replica's rows, its stage's layers, its key/value
    heads. GPT-2: n_head / tp heads of d_model / n_head. Llama (GQA): n_kv_heads / tp, or one head when
    there are fewer key/value heads than TP ranks (tp.py replicates them and each rank runs the one its
    query heads share)."""
    rows = -(-len(prompts) // layout.dp)
    longest = max(len(p) for p in prompts)
    layers = -(-cfg.n_layer // layout.pp)
    head_dim = cfg.d_model // cfg.n_head
    kv_heads = max(1, getattr(cfg, "n_kv_heads", cfg.n_head) // layout.tp)
    return kv_nbytes(layers, rows, longest + max_new, kv_heads * head_dim, elem_bytes)


def decode(forward, pick, ids: torch.Tensor, pad: torch.Tensor, opts: Options, on_token=None) -> torch.Tensor:
    """Prefill then decode one batch on one model part that has the embedding and the head (single or
    TP). `forward(x, cache) -> last-position logits (batch, vocab)`. Without the cache every step re-runs
    the whole sequence (a fresh cache per step is only its mask and positions). Returns (batch, max_new)."""
    out = []
    if opts.use_cache:
        cache = KVCache(pad, ids.shape[1] + opts.max_new)
        logits = forward(ids, cache)
        for step in range(opts.max_new):
            tok = pick(logits)
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            if step + 1 < opts.max_new:
                logits = forward(tok[:, None], cache)
    else:
        seq = ids
        for step in range(opts.max_new):
            tok = pick(forward(seq, KVCache(pad, seq.shape[1])))
            out.append(tok)
            if on_token is not None:
                on_token(tok)
            seq = torch.cat([seq, tok[:, None]], dim=1)
    return torch.stack(out, dim=1)


def _dims(layout: Layout):
    from shardlab.parallel.mesh import ParallelDims

    dims = ParallelDims(dp_replicate=layout.dp, tp=layout.tp, pp=layout.pp)
    if layout.world > 1:
        if comm.world_size() != layout.world:
            raise ValueError(f"layout tp={layout.tp} x pp={layout.pp} x dp={layout.dp} needs {layout.world} "
                             f"ranks, the world has {comm.world_size()}")
        dims.build_mesh(comm.device().type)
    return dims


def generate(model, prompts: list[list[int]], opts: Options, layout: Layout = Layout(),
             on_token=None) -> tuple[torch.Tensor, Stats]:
    """Every rank calls it with the same prompts and the same bare model. Returns the (n_prompts, max_new)
    generated ids on every rank of pipeline stage 0 (others get an empty tensor) and rank 0's Stats.
    `on_token(prompt_index, token_id)` streams the first prompt's tokens as they come (stage 0 only)."""
    from shardlab.parallel.tp.own import apply_tp

    dims = _dims(layout)
    device = comm.device()
    replica = dims.coord("dp_replicate")
    per = -(-len(prompts) // layout.dp)
    rows = list(range(replica * per, min(len(prompts), (replica + 1) * per)))
    stats = Stats(kv_bytes=kv_cache_bytes(model.cfg, layout, prompts, opts.max_new))

    model = model.to(device).eval()
    stage = dims.coord("pp")
    if layout.pp > 1:
        model = split_stage(model, stage, layout.pp)
    tp = None
    if layout.tp > 1:
        torch.manual_seed(0)  # TP splits are deterministic; the dropout streams (p = 0 here) want alike seeds
        tp = apply_tp(copy.deepcopy(model), dims.group("tp"))  # it splits in place: keep the caller's model
        model = tp.model

    def logits_of(y):  # this layout's last-position logits (gathered over tp)
        return last_logits(y, model.cfg.vocab_size, tp)

    def forward(x, cache):
        return logits_of(model(x, cache))

    comm.RECORDER.reset_step()
    t0 = time.perf_counter()
    first = []

    def stream(tok):
        if not first:
            first.append(time.perf_counter())
        if on_token is not None and replica == 0:
            on_token(rows[0], int(tok[0]))

    local = torch.empty(0, opts.max_new, dtype=torch.long)
    with torch.no_grad(), dropless(model):  # MoE: no capacity drops at inference (model/moe.py says why)
        if rows:
            if layout.pp > 1:
                local = pipeline_decode(model, stage, layout.pp, dims.group("pp"), [prompts[r] for r in rows],
                                        rows, opts, logits_of, stream, device)
            else:
                ids, pad = left_pad([prompts[r] for r in rows], device)
                local = decode(forward, Sampler(opts, rows), ids, pad, opts, stream)
    t_end = time.perf_counter()
    stats.comm_bytes = dict(comm.RECORDER.step_stats()["bytes"])

    result = local
    if layout.dp > 1 and stage == 0:  # every replica's tokens, in prompt order (chunks padded to `per`)
        buf = torch.full((per, opts.max_new), -1, dtype=torch.long, device=device)
        buf[:local.shape[0]] = local.to(device)
        full = torch.empty(layout.dp * per, opts.max_new, dtype=torch.long, device=device)
        comm.all_gather(full, buf, group=dims.group("dp_replicate"), tag="generate.tokens")
        result = full[:len(prompts)]
    wall = time.perf_counter() - t0
    stats.tokens = len(prompts) * opts.max_new
    stats.local_tokens = len(rows) * opts.max_new
    stats.wall_s = wall
    stats.tokens_per_s = stats.tokens / wall if wall > 0 else 0.0
    if first:
        stats.ttft_s = first[0] - t0
        stats.per_token_s = (t_end - first[0]) / max(1, opts.max_new - 1)
    return (result.cpu() if stage == 0 else torch.empty(0, opts.max_new, dtype=torch.long)), stats


def analytic_comm_bytes(cfg, layout: Layout, prompts: list[list[int]], opts: Options, rank_stage: int = 0,
                        lanes: list[list[int]] | None = None) -> dict[str, int]:
    """Payload bytes (comm's convention) one rank of replica 0 sends and receives while generating, by op.
    TP: (2L + 1) all-reduces of (rows x new positions x d_model) fp32 per forward, and one all-gather of
    the last position's padded-vocabulary logits per picked token. PP: each forward's hidden states
    (fp32) from stage s to s + 1, and each picked token (int64) from the last stage back to the first.
    DP: nothing per token (one all-gather of the ids at the end, not counted here)."""
    rows = prompts[:-(-len(prompts) // layout.dp)]
    n, longest = opts.max_new, max(len(p) for p in rows)
    positions = longest + (n - 1) if opts.use_cache else sum(longest + i for i in range(n))
    out: dict[str, int] = {}
    if layout.tp > 1:
        vpad = -(-cfg.vocab_size // layout.tp) * layout.tp
        out["all_reduce"] = (2 * cfg.n_layer + 1) * len(rows) * positions * cfg.d_model * 4
        out["all_gather"] = n * len(rows) * vpad * 4
    if layout.pp > 1:
        hidden = tok = 0
        for lane in lane_rows(len(rows), opts.lanes or layout.pp):
            lp = [rows[i] for i in lane]
            ll = max(len(p) for p in lp)
            pos = ll + (n - 1) if opts.use_cache else sum(ll + i for i in range(n))
            hidden += len(lp) * pos * cfg.d_model * 4
            tok += n * len(lp) * 8
        s, last = rank_stage, layout.pp - 1
        out["send"] = (hidden if s < last else 0) + (tok if s == last else 0)
        out["recv"] = (hidden if s > 0 else 0) + (tok if s == 0 else 0)
    return out
