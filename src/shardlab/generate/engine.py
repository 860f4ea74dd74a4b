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

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from shardlab import comm
from shardlab.degrees import Degrees
from shardlab.generate.lanes import lane_rows, pipeline_decode
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


def inference_config(layout: Layout):
    """The config the composition builds generation's layout from: the layout's degrees, seed 0 (the TP
    layer seeds the dropout streams from it: p = 0 here, but every rank must draw alike), own TP."""
    from shardlab.config.schema import Config

    cfg = Config()
    p = cfg.parallel
    p.tp, p.pp, p.dp_replicate, p.dp_shard = layout.tp, layout.pp, layout.dp, 1
    cfg.train.seed = 0
    return cfg


def compose(model, layout: Layout):
    """This rank's part for `layout`, through the training composition in its inference mode
    (parallel/compose.py: pipeline stage, then tensor parallel); returns (dims, part, the TP layer's object
    or None). `model` is the whole single-device model (split from a copy), or the path of a checkpoint or
    Hugging Face directory: then the model is built on the meta device, cut there, and this rank allocates
    and reads only its part (generate/shard_load.py): no rank holds the whole model."""
    from shardlab.parallel.compose import build_inference

    if layout.world > 1 and comm.world_size() != layout.world:
        raise ValueError(f"layout tp={layout.tp} x pp={layout.pp} x dp={layout.dp} needs {layout.world} "
                         f"ranks, the world has {comm.world_size()}")
    if isinstance(model, (str, Path)):
        from shardlab.generate import load, shard_load

        cfg = load.model_config(model)
        dims, part, handles = build_inference(inference_config(layout), cfg, comm.device())
        tp = next((h.impl for h in handles if h.name == "tp"), None)
        shard_load.load_part(model, cfg, part, tp)
        return dims, part, tp
    dims, part, handles = build_inference(inference_config(layout), model, comm.device())
    tp = next((h.impl for h in handles if h.name == "tp"), None)
    return dims, part, tp


def generate(model, prompts: list[list[int]], opts: Options, layout: Layout = Layout(),
             on_token=None) -> tuple[torch.Tensor, Stats]:
    """Every rank calls it with the same prompts and the same bare model, or the same checkpoint path
    (each rank then reads only its part: `compose`). Returns the (n_prompts, max_new)
    generated ids on every rank of pipeline stage 0 (others get an empty tensor) and rank 0's Stats.
    `on_token(prompt_index, token_id)` streams the first prompt's tokens as they come (stage 0 only)."""
    dims, model, tp = compose(model, layout)
    device = comm.device()
    replica = dims.coord("dp_replicate")
    per = -(-len(prompts) // layout.dp)
    rows = list(range(replica * per, min(len(prompts), (replica + 1) * per)))
    stats = Stats(kv_bytes=kv_cache_bytes(model.cfg, layout, prompts, opts.max_new))
    stage = dims.coord("pp")

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
    TP: per forward, one all-reduce of (rows x new positions x d_model) fp32 per attention and per MLP of the
    rank's layers, plus one after the embedding on the first stage, and one all-gather of the last position's
    padded-vocabulary logits per picked token on the last stage. PP: each forward's hidden states (fp32)
    from stage s to s + 1, and each picked token (int64) from the last stage back to the first. DP: nothing
    per token (one all-gather of the ids at the end, not counted here)."""
    from shardlab.parallel.pp.stage import stage_ranges

    rows = prompts[:-(-len(prompts) // layout.dp)]
    n = opts.max_new
    s, last = rank_stage, layout.pp - 1
    groups = [list(range(len(rows)))] if layout.pp == 1 else lane_rows(len(rows), opts.lanes or layout.pp)
    # (rows, positions the forwards see) of each lane: the prompt, then one per step (the whole sequence again
    # without the cache)
    work = []
    for lane in groups:
        ll = max(len(rows[i]) for i in lane)
        work.append((len(lane), ll + (n - 1) if opts.use_cache else sum(ll + i for i in range(n))))
    out: dict[str, int] = {}
    if layout.tp > 1:
        layers = len(stage_ranges(cfg.n_layer, layout.pp)[s])
        vpad = -(-cfg.vocab_size // layout.tp) * layout.tp
        out["all_reduce"] = sum((2 * layers + (s == 0)) * b * pos * cfg.d_model * 4 for b, pos in work)
        if s == last:
            out["all_gather"] = n * len(rows) * vpad * 4
    if layout.pp > 1:
        hidden = sum(b * pos * cfg.d_model * 4 for b, pos in work)
        tok = n * len(rows) * 8
        out["send"] = (hidden if s < last else 0) + (tok if s == last else 0)
        out["recv"] = (hidden if s > 0 else 0) + (tok if s == 0 else 0)
    return out
