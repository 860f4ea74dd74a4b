"""Compute time of one micro batch on one rank, op by op (a roofline per op):
  GEMM          FLOPs / achieved FLOP/s at that shape (calibrated table, fit, or peak x efficiency)
  elementwise   bytes moved / memory bandwidth (LayerNorm, GELU, softmax, residual adds, loss)
  every other   dispatched op (views, transposes, autograd bookkeeping) x its eager overhead
Backward: each GEMM becomes two (dX and dW) of equal FLOPs; elementwise ops move about twice the
bytes, each family (LayerNorm, GELU, copies, ...) at its own calibrated rate.
The op list is ops.py's.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from functools import partial

from . import attention, fp8, fusion, host as host_mod, moe, torch_tp
from .compute_notes import dropout_note, ring_note, titan_note, z_loss_note
from .recompute import early_stop_note, recomputed_ops
from .hardware import Cluster
from .layout import Layout, ends_as_blocks, pp_layout_moe_blocks, pp_layout_ranks, stage_layers
from .train_spec import OPTIMIZER_PASSES, TrainSpec
from .model import ModelSpec
from .ops import COLUMN_PARALLEL, DEFAULT_OP_COUNTS, ROW_REGIONS, Op, embed_ops, head_ops, layer_ops


def in_situ_keyed(op: Op) -> bool:
    """Ops the in-situ calibration times one by one at their exact shape (GEMMs, attention, LayerNorm,
    GELU); everything else the model runs is measured there as one remainder (`rest_*`)."""
    return op.kind == "gemm" or op.ew in ("ln", "gelu")


def rest_key(model: ModelSpec, b: int, s: int) -> str:
    """Table key suffix of what was calibrated in situ for exactly this model and micro batch."""
    key = f"{model.n_layer},{model.d_model},{model.n_head},{model.vocab},{s},{b},{model.mlp_ratio},{int(model.tied)}"
    return key + (f",llama{model.n_kv_heads},{model.ffn}" if model.llama else "")


def _keyed_sum(block: list[Op], head: list[Op], layers: int, c: Cluster, backward: bool) -> float:
    """Seconds of the in-situ keyed ops of one micro batch: `layers` blocks and the head."""
    return sum(layers * _op_time(o, c, True, backward) for o in block if in_situ_keyed(o)) + \
        sum(_op_time(o, c, True, backward) for o in head if in_situ_keyed(o))


def keyed_time(model: ModelSpec, b: int, table: dict) -> tuple[float, float] | None:
    """(forward, backward) seconds of the in-situ keyed ops of one micro batch, as micro_batch_time
    adds them up from `table`; None when the table lacks one of them (no fallback: NaN rates)."""
    nan = float("nan")
    c = Cluster("table", 1, 1, nan, nan, nan, nan, nan, nan, nan, nan, gemm_table=table)
    block, head = layer_ops(model, b, model.seq, 1, 4, True), head_ops(model, b, model.seq, 1, 4)
    out = tuple(_keyed_sum(block, head, model.n_layer, c, bw) for bw in (False, True))
    return None if any(x != x for x in out) else out


def _gemm_rate(c: Cluster, kind: str, m: int, n: int, k: int, fp32: bool) -> float:
    return c.gemm_table.get(f"{kind}:{m},{n},{k}") or c.gemm_flops(m, n, k, fp32)


def _gemm_time(op: Op, c: Cluster, kind: str, mnk: tuple, fp32: bool) -> float:
    """One GEMM of `op` at shape (m, n, k): FLOPs / achieved rate, and on GPU presets (gemm_roofline) no less
    than the time to move its operands and output through HBM once (NVIDIA's Matrix Multiplication Background
    guide: a GEMM whose arithmetic intensity is below the GPU's FLOP:byte ratio is memory-bound, as the k/v
    projections of width g/t = 128 under TP 8 are)."""
    m, n, k = mnk
    # a batched GEMM (attention heads) runs its count x tiles in one launch: its waves are over all of them
    rows = m * op.count if c.gemm_roofline and f"{kind}:{m},{n},{k}" not in c.gemm_table else m
    t = op.flops / _gemm_rate(c, kind, rows, n, k, fp32)
    # (not the fused attention kernel: it never writes the s x s scores its shape describes)
    if c.gemm_roofline and op.name != "attention" and f"{kind}:{m},{n},{k}" not in c.gemm_table:
        moved = (m * k + k * n + m * n) * (4 if fp32 else 2)
        t = max(t, op.count * moved / c.hbm_at(moved, c.hbm_bw))
    return t


@dataclass(frozen=True)
class MicroTime:
    fwd: float  # one forward of the stage
    bwd: float  # one backward (recomputation included)
    recompute: float  # part of bwd that is recomputed forward
    gemm_flops: float  # hardware FLOPs of fwd+bwd (recompute included)
    in_situ: bool = False  # keyed ops + the remainder measured in situ at exactly this shape
    how: str = "roofline"  # in situ | interpolated | scaled (from the in-situ calibration) | roofline
    kernels: tuple = (0, 0)  # kernels one block launches, forward and backward (launch gaps)
    compiled: str = ""  # what torch.compile changed per block, for --explain ("" eager)
    # per FSDP unit, for the per-unit overlap (step.py): one block's forward and backward (its recompute and
    # launch gaps included) and the head's (final norm, logits, loss), forward and backward; per-op roofline
    block: tuple = (0.0, 0.0)
    head: tuple = (0.0, 0.0)
    # per region a block enters (attention, MLP): its column-parallel linears' weight-gradient GEMMs' seconds and
    # input-gradient GEMMs' seconds, ((w_att, w_mlp), (d_att, d_mlp)): what Megatron's async TP backward hides behind
    tp_hide: dict = field(default_factory=dict)
    mixed: str = ""  # a model of dense and MoE blocks: how its two kinds were weighted, for --explain
    # one block's (forward, backward) host seconds to issue its kernels (plan/host.py), and the slowest rank's blocks
    host: tuple = (0.0, 0.0)
    blocks: int = 0


def _op_time(op: Op, c: Cluster, fp32: bool, backward: bool) -> float:
    if op.name == "attention" and attention.calibrated(op, c):
        # fused attention measured as one op (calibration): forward and backward rates
        key = attention.sdpa_key(op)
        return 2 * op.flops / c.gemm_table["sdpa_bwd:" + key] if backward else op.flops / c.gemm_table["sdpa:" + key]
    if op.name == "attention" and c.attention and not fp32:
        # seq: the keys a query sees; window: the sliding-window blocks' share (ops._window)
        return attention.kernel_time(op.flops, c, backward, seq=op.shape[1], window=op.window)
    if op.kind == "gemm":
        m, n, k = op.shape
        if backward:  # dX = dY W and dW = dY^T X, equal FLOPs
            return _gemm_time(op, c, "mm", (m, k, n), fp32) + _gemm_time(op, c, "mm_ta", (n, k, m), fp32)
        return _gemm_time(op, c, "linear" if op.bias else "linear_nobias", (m, n, k), fp32)
    bw = c.elementwise_bw or c.hbm_bw
    pre = "_bwd" if backward else ""
    nbytes = (2 * op.bytes if op.bwd_bytes is None else op.bwd_bytes) if backward else op.bytes
    if nbytes == 0:
        return 0.0
    # calibrated at exactly this size (keyed by the forward bytes), else the family's latency + bw fit
    exact = c.gemm_table.get(f"ewt{pre}:{op.ew}:{int(op.bytes)}") if op.bwd_bytes is None or not backward \
        else None
    if exact is not None:
        return exact * op.count
    # (the family's calibrated rate, else the achieved HBM bandwidth at one call's bytes: GPU presets)
    rate = c.gemm_table.get(f"ew{pre}:{op.ew}") or c.hbm_at(nbytes / max(1, op.count), bw)
    return op.count * (c.gemm_table.get(f"ewa{pre}:{op.ew}", 0.0) + nbytes / rate)


def tp_hiding(block: list[Op], c: Cluster, fp32: bool, lay: Layout, rate=None) -> dict:
    """{overlap tag: (attention region's s, MLP region's s)}: the GEMMs a TP collective runs beside.
    Megatron's async TP backward (Layout.tp_async_backward): "wgrad" and "dgrad", each region's column-parallel
    weight- and input-gradient GEMMs. Transformer Engine's userbuffers (Layout.tp_comm_overlap) adds the forward's
    "col_fprop" (the column-parallel GEMMs an all-gather feeds), "row_fprop" (the row-parallel GEMM a reduce-scatter
    follows) and the backward's "row_dgrad" (the row-parallel input-gradient GEMM a gradient all-gather feeds).
    `rate(op, seconds, backward)`: the op's seconds as run (train.fp8's converted GEMMs)."""
    if not (lay.tp_async_backward or lay.tp_comm_overlap):
        return {}
    rate = rate or (lambda o, t, backward: t)

    def part(o, kind, shape, backward, whole):  # one of the op's GEMMs, at the op's run rate
        t, run = _gemm_time(o, c, kind, shape, fp32), rate(o, whole, backward)
        return t if run == whole or not whole else t * run / whole

    def fwd(o):
        return part(o, "linear" if o.bias else "linear_nobias", o.shape, False, _op_time(o, c, fp32, False))

    def dx(o):
        return part(o, "mm", (o.shape[0], o.shape[2], o.shape[1]), True, _op_time(o, c, fp32, True))

    def dw(o):
        return part(o, "mm_ta", (o.shape[1], o.shape[2], o.shape[0]), True, _op_time(o, c, fp32, True))
    gemms = [o for o in block if o.kind == "gemm"]
    cols = [[o for o in gemms if o.name in names] for names in COLUMN_PARALLEL]
    rows = [[o for o in gemms if o.name in names] for names in ROW_REGIONS]
    out = {"wgrad": tuple(sum(dw(o) for o in ops) for ops in cols),
           "dgrad": tuple(sum(dx(o) for o in ops) for ops in cols)}
    if lay.tp_comm_overlap:
        out.update(col_fprop=tuple(sum(fwd(o) for o in ops) for ops in cols),
                   row_fprop=tuple(sum(fwd(o) for o in ops) for ops in rows),
                   row_dgrad=tuple(sum(dx(o) for o in ops) for ops in rows))
    return out


def micro_batch_time(model: ModelSpec, train: TrainSpec, lay: Layout, c: Cluster) -> MicroTime:
    """Slowest pipeline stage: the busiest rank's layers (stage_layers) plus the first stage's
    embedding or the last stage's logits + loss, whichever costs more. A model of dense and MoE blocks
    (`ModelSpec.mixed_blocks`: moe_every > 1, moe_first_dense) is timed as all-MoE and as all-dense, weighted by
    the MoE blocks' share of the model, or under a pipeline layout by each rank's own blocks (`_by_rank_mix`)."""
    if not model.mixed_blocks:
        return _micro_batch_time(model, train, lay, c)
    if lay.pp > 1 and lay.pp_layout:
        return _by_rank_mix(model, train, lay, c)
    w = model.moe_blocks / model.n_layer
    moe, dense = (_micro_batch_time(model.uniform(x), train, lay, c) for x in (True, False))
    return _blend(w, moe, dense, f"; {model.moe_blocks} of {model.n_layer} blocks MoE: the step's blocks timed as "
                                 f"MoE and as dense, weighted {w:.3f} / {1 - w:.3f}")


def _blend(w: float, moe: MicroTime, dense: MicroTime, words: str) -> MicroTime:
    """The MoE variant's times weighted `w` and the dense variant's 1 - w (a rank's blocks of the two kinds)."""
    mix = lambda x, y: w * x + (1 - w) * y  # noqa: E731
    pair = lambda x, y: tuple(mix(a, b) for a, b in zip(x, y))  # noqa: E731
    return replace(moe, fwd=mix(moe.fwd, dense.fwd), bwd=mix(moe.bwd, dense.bwd),
                   recompute=mix(moe.recompute, dense.recompute), gemm_flops=mix(moe.gemm_flops, dense.gemm_flops),
                   kernels=tuple(round(x) for x in pair(moe.kernels, dense.kernels)), block=pair(moe.block, dense.block),
                   head=pair(moe.head, dense.head), host=pair(moe.host, dense.host),
                   tp_hide={k: pair(v, dense.tp_hide.get(k, (0.0, 0.0))) for k, v in moe.tp_hide.items()}, mixed=words)


def _by_rank_mix(model: ModelSpec, train: TrainSpec, lay: Layout, c: Cluster) -> MicroTime:
    """A mixed model under a pipeline layout: each rank timed with its own dense and MoE blocks (DeepSeek-V3's
    three dense blocks all on the first stage, beside the embedding), the slowest rank's kept. Ranks alike in
    blocks, ends and MoE blocks are timed once."""
    ranks = pp_layout_ranks(lay.pp_layout, lay.pp)
    moes = pp_layout_moe_blocks(lay.pp_layout, lay.pp, model.is_moe)
    best = None
    for r in sorted({(ranks[r], moes[r]): r for r in range(lay.pp)}.values()):
        n = ranks[r][0]
        w = moes[r] / n if n else 0.0
        mt = _blend(w, *(_micro_batch_time(model.uniform(x), train, lay, c, rank=r) for x in (True, False)),
                    f"; the slowest rank's blocks {moes[r]} MoE and {n - moes[r]} dense (each rank timed with its "
                    f"own under the pipeline layout; the model's {model.moe_blocks} of {model.n_layer})")
        if best is None or mt.fwd + mt.bwd > best.fwd + best.bwd:
            best = mt
    return best


def _micro_batch_time(model: ModelSpec, train: TrainSpec, lay: Layout, c: Cluster,
                      rank: int | None = None) -> MicroTime:
    s = (train.seq or model.seq) // lay.cp  # context parallelism: this rank's tokens
    b, t = train.micro_batch, lay.tp
    e = train.param_bytes
    fp32 = not train.mixed
    layers = stage_layers(model.n_layer, lay.pp, lay.v)
    sp = lay.sp and t > 1
    roofline = not (c.gemm_table or c.gemm_fit or c.overhead)  # a GPU preset (a profile measured its own ops)
    drops = train.dropout and roofline  # the dropout kernels, where the run drops out
    compiled = fusion.applies(train, c)  # train.compile on a GPU preset: Inductor's fused groups (plan/fusion.py)
    impl = train.llama_impl if not compiled else "own"  # torchtitan's eager kernels; compiled: fusion.py's count
    block = layer_ops(model, b, s, t, e, train.flash_attention, train.eager_norm, sp, drops, impl)
    # Megatron-Core's passes around the experts: the all-to-all dispatcher's sort by expert, the eager expert bias
    # and GLU clamp
    block = block + moe.sort_ops(model, train, lay, e) + moe.bias_ops(model, train, lay) \
        + moe.clamp_ops(model, train, lay)
    if roofline:  # DTensor TP's sequence-dim copies around its collectives (plan/torch_tp.py)
        block = torch_tp.cat_copies(block, train, lay, b, s, model.d_model, e)
    block = context_parallel(block, lay.cp)
    if lay.cp > 1 and lay.cp_impl == "torch" and train.flash_attention and roofline:
        block = block + [ring_merge_op(model, b, s, t, lay.cp, compiled)]  # torch's ring: its merge kernels
    eager_block, casts = block, None
    if compiled:
        block = fusion.compiled_block(block, model, b, s, t, e, sp and model.llama)
        casts = partial(fusion.cast_bytes, llama=model.llama)

    def ops_time(ops, backward, casts=casts):  # train.fp8: the converted linears at the FP8 peak, plus their casts
        return sum(fp8.gemm_seconds(o, _op_time(o, c, fp32, backward), backward, c, train, lay, casts) for o in ops)
    f_block, b_block = ops_time(block, False), ops_time(block, True)
    f_emb, b_emb = ops_time(embed_ops(model, b, s, e), False), ops_time(embed_ops(model, b, s, e), True)
    head = head_ops(model, b, s, t, e, upcast=train.llama_impl == "torchtitan" and not train.fused_loss,
                    z_loss=train.z_loss)
    f_head, b_head = ops_time(head, False), ops_time(head, True)
    mtp = (0.0, 0.0)
    if model.mtp_layers:  # a multi-token-prediction depth (the last stage's): its projection, a block, the head again
        T, h = b * s, model.d_model
        proj = [Op("mtp_norms", "elem", bytes=2 * 2 * T * h * e, ew="ln"),
                Op("eh_proj", "gemm", flops=2 * T * 2 * h * h / t, shape=(T, h // t, 2 * h))]
        mtp = (ops_time(proj, False) + f_block + f_head, ops_time(proj, True) + b_block + b_head)
        if not lay.pp_layout:  # the MTP depths go with the head (a layout places them itself)
            f_head, b_head, mtp = f_head + model.mtp_layers * mtp[0], b_head + model.mtp_layers * mtp[1], (0.0, 0.0)
    layers, (f_end, b_end), split_why = _slowest_rank(model, lay, layers, f_block * (
        2 if lay.recompute == "full" else 1) + b_block, (f_emb, b_emb), (f_head, b_head), mtp, rank)
    fwd = layers * f_block + f_end
    # torch's checkpoint ends at the last GEMM's pack (a dropout mask after it would be saved: GPT-2's blocks)
    stop = train.recompute_early_stop and not (drops and not model.llama)
    rec_ops = recomputed_ops(block, lay.recompute, stop, lay.recomputed_modules)
    rec = layers * ops_time(rec_ops, False)
    fw_extra, bw_extra = _framework(c, len(block), layers)
    # the kernels a block launches: Megatron-Core's TE layer by its own count (plan/host.py), else the op list's
    kernels = host_mod.te_kernels(model, train, lay) if impl == "te" else block_kernels(block)
    if train.llama_impl == "own" and not compiled:  # shardlab's MoE: its experts one after another
        kernels = tuple(x + y for x, y in zip(kernels, host_mod.own_expert_loop(model)))
    gap = host_mod.launch_gap(train, c.kernel_gap_s)
    gap_f, gap_b = kernels[0] * gap, kernels[1] * gap
    fwd, bwd = fwd + fw_extra + layers * gap_f, layers * (b_block + gap_b) + b_end + bw_extra
    # as calibrated in situ: shardlab's GPT (fused attention) in fp32, the whole model on one rank
    how = "roofline"
    if t == 1 and lay.pp == 1 and lay.cp == 1 and e == 4 and train.flash_attention:
        got = in_situ_pass(model, b, s, c, lay.health_check)
        if got is not None:
            (fwd, bwd), how = got
    bwd += rec
    k = c.compute_speed(lay.world)  # calibrated CPU seconds -> wall seconds on shared cores
    fwd, bwd, rec = fwd / k, bwd / k, rec / k
    rec_block = rec / layers if layers else 0.0
    per_block = ((f_block + gap_f) / k, (b_block + gap_b) / k + rec_block)
    gemm = sum(o.flops for o in block if o.kind == "gemm") * layers * 3
    gemm += sum(o.flops for o in head if o.kind == "gemm") * 3
    if lay.recompute == "full" or lay.recompute_modules:
        gemm += sum(o.flops for o in rec_ops if o.kind == "gemm") * layers
    why = early_stop_note(block, lay.recompute, ops_time) if stop else ""
    why += titan_note(block, head, ops_time) if train.llama_impl == "torchtitan" and model.llama else ""
    why += z_loss_note(head, ops_time)
    why += (dropout_note(block, ops_time) if drops and not model.llama else "") + ring_note(block, ops_time, compiled) \
        + split_why
    if compiled:
        why += fusion.note(eager_block, block, ops_time(eager_block, False, None), f_block,
                          ops_time(eager_block, True, None), b_block, block_kernels(block), block_kernels(eager_block))
    hide = {tag: tuple(x / k for x in pair) for tag, pair in tp_hiding(
        block, c, fp32, lay, lambda o, t, bw: fp8.gemm_seconds(o, t, bw, c, train, lay, casts)).items()}
    host = host_mod.block_seconds(train, lay, c.host_kernel_s, kernels) if roofline else (0.0, 0.0)
    return MicroTime(fwd, bwd, rec, gemm, how == "in situ", how, kernels, why, per_block,
                     (f_head / k, b_head / k), hide, host=host, blocks=layers)


def _slowest_rank(model: ModelSpec, lay: Layout, layers: int, per_block: float, emb: tuple, head: tuple,
                  mtp: tuple = (0.0, 0.0), rank: int | None = None):
    """(blocks, (forward, backward) of its ends, --explain's words) of the pipeline rank that sets the pace.
    pp_split=blocks: the busiest rank's blocks and the costlier end (the embedding or the head + loss, with the
    MTP depths) added; ends-as-blocks: the slowest rank of DeepSpeed's cut by count (`ends_as_blocks`), its own
    ends; a pp_layout (Megatron-Core's): the slowest rank of the layout's, its blocks, ends and MTP depths."""
    n_mtp = model.mtp_layers
    if lay.pp == 1:
        return layers, (emb[0] + head[0] + n_mtp * mtp[0], emb[1] + head[1] + n_mtp * mtp[1]), ""
    if lay.pp_layout:
        ranks = pp_layout_ranks(lay.pp_layout, lay.pp)
        n, n_emb, n_m, n_head = ranks[rank] if rank is not None else max(ranks, key=lambda r: r[0] * per_block + r[1]
                                                                         * sum(emb) + r[2] * sum(mtp) + r[3] * sum(head))
        why = (f"; stages as the run's layout holds them (pp_layout={lay.pp_layout}), the slowest rank {n} blocks"
               + (" + the head" if n_head else "") + (" + the embedding" if n_emb else "")
               + (f" + {n_m} MTP depth{'s' if n_m > 1 else ''}" if n_m else ""))
        return n, tuple(n_emb * x + n_m * y + n_head * z for x, y, z in zip(emb, mtp, head)), why
    if lay.pp_split != "ends-as-blocks":
        return layers, max((emb, head), key=lambda x: x[0] + x[1]), ""
    n, n_emb, n_head = max(ends_as_blocks(model.n_layer, lay.pp, lay.v),
                           key=lambda r: r[0] * per_block + r[1] * sum(emb) + r[2] * sum(head))
    why = (f"; stages cut with the embedding and the head weighing a block each (pp_split=ends-as-blocks: "
           f"{model.n_layer} + 2 over {lay.pp * lay.v} stages), the slowest rank {n} blocks"
           + (" + the head" if n_head else "") + (" + the embedding" if n_emb else ""))
    return n, (n_emb * emb[0] + n_head * head[0], n_emb * emb[1] + n_head * head[1]), why


def block_kernels(block: list[Op]) -> tuple[int, int]:
    """(forward, backward) kernels one block launches: one per op call forward (a GEMM, an elementwise op,
    the fused attention), two per GEMM backward (dX, dW), three for the attention backward (FlashAttention's
    preprocess, main and dq conversion), one per elementwise op that moves bytes backward."""
    fwd = sum(o.count if o.kind == "elem" else 1 for o in block if o.kind == "gemm" or o.bytes)
    bwd = sum(3 if o.name == "attention" else 2 if o.kind == "gemm" else o.count for o in block
              if o.kind == "gemm" or (o.bytes if o.bwd_bytes is None else o.bwd_bytes))
    return fwd, bwd


def ring_merge_op(model: ModelSpec, b: int, s: int, t: int, cp: int, compiled: bool = False) -> Op:
    """torch's ring attention's merge and accumulation kernels per layer (attention.RING_MERGE_BYTES; fused
    under compile, RING_MERGE_BYTES_COMPILED), over N = b x (heads / t) x s x d elements of this rank's
    s = seq/cp queries."""
    fwd, bwd = attention.ring_merge_bytes(b * s * model.d_model / t, cp, compiled)
    return Op("cp_merge", "elem", bytes=fwd, ew="add", bwd_bytes=bwd)


def context_parallel(block: list[Op], cp: int) -> list[Op]:
    """A block's ops on one of `cp` ranks of a sequence: built at s/cp tokens, the attention core then
    scores the rank's s/cp queries against all s keys, cp times the (s/cp)^2 pairs (the ring's cp pair
    calls; Ulysses' one call on h/cp heads over s does the same work)."""
    if cp == 1:
        return block
    core = ("attention", "scores", "softmax", "attn_dropout", "attn_v")  # a GEMM's count is its batch; an elementwise op's bytes total
    return [o if o.name not in core else replace(o, flops=o.flops * cp, count=o.count * cp) if o.kind == "gemm"
            else replace(o, bytes=o.bytes * cp) for o in block]


def _framework(c: Cluster, listed: int, layers: int) -> tuple[float, float]:
    """Eager framework seconds (Python, dispatch, autograd) the per-op times do not include."""
    if c.overhead:
        own = c.op_overhead_s * listed  # the listed ops' own dispatch is already in their times
        return (layers * max(0.0, c.overhead["layer_fwd"] - own) + c.overhead["fixed_fwd"],
                layers * max(0.0, c.overhead["layer_bwd"] - 2 * own) + c.overhead["fixed_bwd"])
    if c.op_overhead_s:
        n = DEFAULT_OP_COUNTS
        return (c.op_overhead_s * (layers * max(0, n["layer_fwd"] - listed) + n["fixed_fwd"]),
                c.op_overhead_s * (layers * max(0, n["layer_bwd"] - 2 * listed) + n["fixed_bwd"]))
    return 0.0, 0.0


def _roofline(model: ModelSpec, b: int, s: int, c: Cluster) -> tuple[float, float]:
    """(forward, backward) CPU seconds of one micro batch by the per-op estimates alone (fp32, fused
    attention, whole model): what the planner says where nothing was measured in situ."""
    block, head = layer_ops(model, b, s, 1, 4, True), head_ops(model, b, s, 1, 4) + embed_ops(model, b, s, 4)
    fw = model.n_layer * sum(_op_time(o, c, True, False) for o in block) + sum(_op_time(o, c, True, False) for o in head)
    bw = model.n_layer * sum(_op_time(o, c, True, True) for o in block) + sum(_op_time(o, c, True, True) for o in head)
    f, b_ = _framework(c, len(block), model.n_layer)
    return fw + f, bw + b_


def _exact(model: ModelSpec, b: int, s: int, c: Cluster, health: bool) -> tuple[float, float] | None:
    """(forward, backward) CPU seconds measured in situ at exactly this model and micro batch: the
    keyed ops at their in-situ rates + the remainder (+ the doctor's hooks), or None."""
    rk = rest_key(model, b, s)
    rest = c.gemm_table.get("rest_fwd:" + rk), c.gemm_table.get("rest_bwd:" + rk)
    if None in rest:
        return None
    block, head = layer_ops(model, b, s, 1, 4, True), head_ops(model, b, s, 1, 4)
    hooks = c.gemm_table.get("hooks:" + rk, 0.0) if health else 0.0
    return (_keyed_sum(block, head, model.n_layer, c, False) + rest[0],
            _keyed_sum(block, head, model.n_layer, c, True) + rest[1] + hooks)


def calibrated_points(c: Cluster) -> list[tuple[ModelSpec, int, int]]:
    """(model, micro batch, seq) of every in-situ calibration in the profile, miniatures excluded
    (1 dim per head: almost no arithmetic, nothing like a model a user plans)."""
    out = []
    for key in c.gemm_table:
        if key.startswith("rest_fwd:"):
            parts = key.split(":", 1)[1].split(",")
            if len(parts) != 8:  # in-situ calibration builds shardlab's GPT only
                continue
            L, h, a, v, s, b, r, tied = map(int, parts)
            if h > a:
                out.append((ModelSpec("calibrated", L, h, a, v, s, r, bool(tied)), b, s))
    return out


def in_situ_pass(model: ModelSpec, b: int, s: int, c: Cluster, health: bool):
    """((forward, backward) CPU seconds, how) from the in-situ calibration, or None without one.
      in situ        this model and micro batch were calibrated: keyed ops + measured remainder
      interpolated   this model at >= 2 other micro batches: the passes are linear in b at a fixed
                     sequence length (every op's work is), least squares through them
      scaled         another model: the per-op estimate x the ratio measured / estimated over the
                     calibrated models (geometric mean), forward and backward apart
    """
    exact = _exact(model, b, s, c, health)
    if exact is not None:
        return exact, "in situ"
    pts = calibrated_points(c)
    same = sorted(pb for m, pb, ps in pts if ps == s and m == replace(model, name="calibrated", seq=m.seq))
    if len(same) >= 2:
        ys = [_exact(model, pb, s, c, health) for pb in same]
        return tuple(_line_at(same, [y[i] for y in ys], b) for i in (0, 1)), "interpolated"
    ratios = []
    for m, pb, ps in pts:
        got, est = _exact(m, pb, ps, c, health), _roofline(m, pb, ps, c)
        if got and min(est) > 0:
            ratios.append((got[0] / est[0], got[1] / est[1]))
    if not ratios:
        return None
    est = _roofline(model, b, s, c)  # the ratios carry the hooks, when asked for, in proportion
    gm = [math.exp(statistics.fmean(math.log(r[i]) for r in ratios)) for i in (0, 1)]
    return (est[0] * gm[0], est[1] * gm[1]), "scaled"


def _line_at(xs: list[int], ys: list[float], x: float) -> float:
    """Least-squares line through (xs, ys), at x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((a - mx) * (y - my) for a, y in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    return max(0.0, my + slope * (x - mx))


def optimizer_time(psi_opt: float, train: TrainSpec, lay: Layout, c: Cluster,
                   tensors: int = 0) -> tuple[float, str]:
    """Adam reads param, grad, m, v and writes param, m, v: 28 B per fp32 parameter (the registry row's
    `step_bytes`; SGD with momentum 20) (+2 B for the
    16-bit copy under mixed precision), memory-bound; or calibrated seconds per parameter.
    Offloaded: CPU Adam at an assumed per-node rate plus grads down / params up over PCIe."""
    if lay.offload != "none":
        rate = c.cpu_adam_params_per_s / c.gpus_per_node
        pcie = psi_opt * (train.grad_bytes + train.param_bytes) / c.pcie_bw
        return psi_opt / rate + pcie, (f"host Adam {psi_opt:,.0f} params / {rate:.3g}/s + PCIe "
                                       f"{train.grad_bytes}+{train.param_bytes} B/param / {c.pcie_bw:.3g} B/s")
    if c.adam_s_per_param:
        return (psi_opt * c.adam_s_per_param + tensors * c.adam_s_per_tensor,
                f"{psi_opt:,.0f} params x {c.adam_s_per_param:.3g} s + {tensors} tensors x "
                f"{c.adam_s_per_tensor:.3g} s (calibrated, grad-norm clip included)")
    per = train.optimizer_row.step_bytes_in(train.optim_dtype) + (2 if train.mixed else 0)  # the row's traffic
    how = ""
    if train.eager_adam and train.optimizer == "adam" and train.optim_dtype == "fp32":
        per += EAGER_ADAM_BYTES - 28
        how = " (AdamW as eager kernels, one per tensor operation)"
    # the achieved HBM bandwidth at one tensor's fp32 operand: the kernels run tensor by tensor
    bw = c.hbm_at(psi_opt * 4 / max(1, tensors))
    t, why = psi_opt * per / bw, f"{psi_opt:,.0f} params x {per} B / {bw:.3g} B/s{how}"
    for name in train.optimizer_passes:  # the run's own passes around the update (TrainSpec.optimizer_passes)
        nbytes, flat = OPTIMIZER_PASSES[name]
        rate = c.hbm_at(psi_opt * 4) if flat else bw
        t += psi_opt * nbytes / rate
        why += f" + {name} {nbytes} B / {rate:.3g} B/s"
    return t, why


# AdamW in eager kernels, per fp32 parameter: torch's foreach AdamW (torch.optim.adamw._multi_tensor_adamw:
# lerp of exp_avg 12, mul and addcmul of exp_avg_sq 8 + 16, the decoupled decay's mul of the params 8, sqrt,
# div, add of the denominator 8 + 8 + 8, the params' addcdiv 16) and Composer's DecoupledAdamW (a loop over the
# tensors: mul_ and add_ of exp_avg 8 + 12, mul_ and addcmul_ of exp_avg_sq 8 + 16, sqrt, / and add_ 8 + 8 + 8,
# addcdiv_ 16; its decay's mul_ skipped at weight_decay 0, as the MPT yamls set it): 84 B each, where a fused
# kernel reads param, grad, m, v and writes param, m, v once (28 B). Gradient clipping is in neither count
EAGER_ADAM_BYTES = 84
