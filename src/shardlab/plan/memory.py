"""Per-GPU memory: model states (ZeRO, Rajbhandari et al. 2020) + activations (Korthikanti et al. 2022).

Model states for Psi parameters with mixed precision and Adam: 2Psi (16-bit params) + 2Psi (16-bit
grads) + K*Psi with K = 12 (fp32 master params, momentum, variance). With N_d data-parallel ranks:
  ddp    (2 + 2 + K) Psi
  zero1  2Psi + 2Psi + K Psi / N_d
  zero2  2Psi + (2 + K) Psi / N_d
  zero3  (2 + 2 + K) Psi / N_d
Shards are padded (per parameter, torch.chunk-style, by default), so Psi/N_d is really padded/N_d.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from . import fp8, moe, offload
from .comm import DTYPE_BYTES, MiB
from .geometry import padded, padded_units, units
from .layout import Layout, stage_layers
from .pipeline_rank import (PEAK_RANK, RankLayout, first_rank_numels, in_flight, layout_rank, rank_moe_blocks,
                            rank_note, split_blocks)
from .train_spec import TrainSpec
from .activations import activation_bytes_extra, activation_bytes_per_layer, logits_bytes, te_counted
from .model import ModelSpec


@dataclass(frozen=True)
class Line:
    name: str
    bytes: float
    formula: str


def state_bytes(model: ModelSpec, train: TrainSpec, lay: Layout) -> dict[str, float]:
    """params / grads / optimizer bytes per rank on the GPU: comparable with summary.json
    `state_bytes` (whose `grads` line counts the gradient buffers a strategy allocates)."""
    return {ln.name: ln.bytes for ln in state_lines(model, train, lay)}


def model_state_bytes(psi: float, n: int, strategy: str, pb: int = 2, gb: int = 2, k: int = 12,
                      shard: float | None = None) -> dict[str, float]:
    """The ZeRO paper's per-rank model states for Psi parameters over n data-parallel ranks;
    `shard` = elements of one rank's padded shard (Psi/n when None). ZeRO keeps unsharded
    tensors padded too (n * shard), as shardlab's zero does, so padding shows in every line."""
    sh = psi / n if shard is None else shard
    full = psi if strategy == "ddp" else n * sh
    return {"params": pb * (sh if strategy == "zero3" else full),
            "grads": gb * (sh if strategy in ("zero2", "zero3") else full),
            "optimizer": k * (full if strategy == "ddp" else sh)}


def state_lines(model: ModelSpec, train: TrainSpec, lay: Layout) -> list[Line]:
    blocks = split_blocks(model, lay)
    numels = first_rank_numels(model, lay)
    psi = sum(numels)
    n = lay.shard
    shard = (padded_units(model, lay.tp, lay.pp, lay.v, n, lay.padding)[0] if blocks is None
             else padded(numels, n, lay.padding)) / n
    pb, gb, k = train.param_bytes, train.grad_bytes, train.optimizer_bytes_of(model, lay)  # its registry row
    z = lay.strategy
    p_sh, g_sh, o_sh = z == "zero3", z in ("zero2", "zero3"), z != "ddp"
    full = psi if z == "ddp" else n * shard
    pe = shard if p_sh else full
    ge = shard if g_sh else full
    oe = shard if o_sh else full
    st = model_state_bytes(psi, n, z, pb, gb, k, shard)
    dn = f"/{n}" if n > 1 else ""
    lines = [
        Line("params", 0 if lay.offload == "params" else st["params"],
             f"{pb} B x Psi{dn if p_sh else ''} = {pb} x {pe:,.0f}"
             + (" (offloaded to host)" if lay.offload == "params" else "")
             + ("" if blocks is None else rank_note(lay, blocks))),
        Line("grads", st["grads"], f"{gb} B x Psi{dn if g_sh else ''} = {gb} x {ge:,.0f}"),
        Line("optimizer", 0 if lay.offload != "none" else st["optimizer"],
             f"K={k:g} B x Psi{dn if o_sh else ''} = {k} x {oe:,.0f}"
             + (" (offloaded to host)" if lay.offload != "none" else "")),
    ]
    if train.lp_grads_kept and gb != pb:
        lines.append(lp_grads_line(psi, pb))
    if model.moe_experts and o_sh and lay.offload == "none" and lay.edp != n:
        lines.append(expert_optimizer_line(model, lay, k, n, blocks))
    if model.moe_experts and lay.edp != n:  # ZeRO-2's and -3's expert shards are the expert group's too
        if g_sh:
            lines.append(expert_state_line("expert grads", model, lay, gb, n, blocks))
        if p_sh and lay.offload != "params":
            lines.append(expert_state_line("expert params", model, lay, pb, n, blocks))
    return lines


def expert_optimizer_line(model: ModelSpec, lay: Layout, k: float, n: int, blocks: int | None) -> Line:
    """The experts' optimizer states are sharded over their own group, the expert-data-parallel ranks (tp x cp x
    dp / ep: Megatron-Core's distributed optimizer shards expert parameters over the expert-data-parallel group),
    not over the `n` ranks the optimizer line divides every parameter by: the difference, signed."""
    return expert_state_line("expert optimizer", model, lay, k, n, blocks, f"K={k:g} B")


def expert_state_line(name: str, model: ModelSpec, lay: Layout, per: float, n: int, blocks: int | None,
                      what: str = "") -> Line:
    """A sharded state of the experts (`per` bytes a parameter) divided by their expert-data-parallel group, edp,
    rather than the `n` ranks its line divides every parameter by: the difference, signed. ZeRO-2's gradients and
    ZeRO-3's parameters shard the experts over the ranks holding the same experts (torchtitan's FSDP of the experts
    over the data-parallel ranks left by ep; Megatron-Core's expert-data-parallel group), as the optimizer's do."""
    layers = stage_layers(model.n_layer, lay.pp, lay.v) if blocks is None else blocks
    own = rank_moe_blocks(model, lay)
    mtp = (layout_rank(lay) or (0, 0, 0, 0))[2]  # an MTP depth's block is an MoE block too
    held = (round(layers * model.moe_blocks / model.n_layer) if own is None else own + mtp) \
        * model.experts_held * model.expert_params
    extra = per * held * (1 / lay.edp - 1 / n)
    return Line(name, extra, f"{what or f'{per:g} B'} x {held:,.0f} expert parameters x (1/edp - 1/{n}), "
                             f"edp = tp x cp x dp / ep = {lay.edp}")


def lp_grads_line(psi: float, pb: int) -> Line:
    """The 16-bit gradients autograd writes (param.grad), kept beside the fp32 buffer they are added into.
    DeepSpeed's BF16_Optimizer (runtime/bf16_optimizer.py, PR #1801, the branch BLOOM ran) copies each micro
    batch's bf16 grads into its unsharded fp32 flat buffer with update_hp_grads(clear_lp_grads=False), and its
    PipelineEngine (pipe/engine.py `_exec_backward_pass`) frees them only with clear_lp_grads() at the start of
    the next backward: between backwards, through the next forwards and the step, every parameter of the stage
    holds a 16-bit gradient too (BLOOM's README: the fp32 buffer is 4 B per parameter "of additional memory").
    Unsharded (one per parameter of the stage), unpadded (autograd's own tensors)."""
    return Line("16-bit grads kept", pb * psi,
                f"{pb} B x Psi = {pb} x {psi:,.0f} (param.grad kept beside the fp32 buffer: DeepSpeed "
                "BF16_Optimizer update_hp_grads(clear_lp_grads=False), freed at the next backward)")


def stored_per_layer(model: ModelSpec, train: TrainSpec, lay: Layout) -> tuple[float, int]:
    """(bytes one micro batch keeps per layer for its backward, the first rank's layers)."""
    s = (train.seq or model.seq) // lay.cp  # context parallelism: each rank holds s/cp of every sequence
    blocks = split_blocks(model, lay)
    layers = stage_layers(model.n_layer, lay.pp, lay.v) if blocks is None else blocks
    own = rank_moe_blocks(model, lay)  # under a pipeline layout the rank's own mix of dense and MoE blocks
    per_layer = activation_bytes_per_layer(model, train.micro_batch, s, lay.tp, lay.sp, lay.recompute,
                                           flash=train.flash_attention, dropout=train.dropout, impl=train.llama_impl,
                                           fp8=train.fp8 != "none", modules=lay.recomputed_modules,
                                           moe_share=own / layers if own is not None and layers else None) \
        * train.act_bytes_scale
    per_layer += moe.clamp_saved_bytes(model, train, lay)  # GPT-OSS's eager GLU clamp: its clamped copy
    return per_layer, layers


def activation_lines(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Line]:
    s = (train.seq or model.seq) // lay.cp  # context parallelism: each rank holds s/cp of every sequence
    b = train.micro_batch
    blocks = split_blocks(model, lay)
    per_layer, layers = stored_per_layer(model, train, lay)
    fl = in_flight(lay, m)
    extra = activation_bytes_extra(model, b, s, lay.tp, lay.sp, lay.pp, fl, dropout=train.dropout,
                                   fused_loss=train.fused_loss, dtensor_loss=train.dtensor_loss) * train.act_bytes_scale
    one = per_layer * offload.kept_layers(layers, lay)  # offload_activations: the rest in host memory
    form = {"none": "sbh(34 + 5as/h)", "selective-attn": "sbh*34", "full": "2sbh",
            "selective": "sbh(2/t_sp + 16/t + 4) + 4asb/t (shardlab's selective)",
            "selective-op": "as selective (torchtitan's op policy: counted for llama only)"}[lay.recompute]
    if model.llama and lay.recompute in ("none", "selective", "selective-op"):  # shardlab's policy, counted as measured
        form = {"none": "llama 2sb(8h + 2g + 4f + 2) + 2abs + 4sd",
                "selective": "llama 2sb(5h + 2g + 2f) + 2abs",
                "selective-op": "llama 2sb(4h + g + f) + 4abs (torchtitan's op policy)"}[lay.recompute] + (f", t={lay.tp}" if lay.tp > 1 else "")
    elif lay.tp > 1 and lay.recompute in ("none", "selective-attn"):
        form = ("sbh/t(34 + 5as/h)" if lay.sp else "sbh(10 + 24/t + 5as/(ht))") \
            if lay.recompute == "none" else ("sbh*34/t" if lay.sp else "sbh(10 + 24/t)")
    if train.flash_attention and lay.recompute == "none":
        form += " without 5as/h (fused attention)"
    if te_counted(model, train.llama_impl, lay.recompute, train.flash_attention):
        form = ("Transformer Engine's saved tensors (norms' inputs, GEMMs' inputs, q k v and the attention output, "
                "SwiGLU's input" + (", per routed copy for the experts" if model.moe_experts else "") + ")"
                + (f", less what recompute_modules={lay.recompute_modules} frees" if lay.recompute_modules else ""))
    if not train.dropout and not model.llama and lay.recompute in ("none", "selective-attn"):
        form += ", less the 2 dropout masks (dropout 0)"
    scale = " x2 (fp32)" if train.act_bytes_scale != 1 else ""
    logits = (logits_bytes(model, b, s, lay.tp, train.fused_loss, train.dtensor_loss) * train.act_bytes_scale) \
        if lay.pp == 1 else 0.0
    loss = (f"; of which the loss's logits {logits:,.0f} B ("
            + ("4sbv/t: fused cross-entropy, 16-bit logits and gradient" if train.fused_loss else
               "12sbv: F.cross_entropy's fp32 log-softmax and gradients" if lay.tp == 1 else
               "16sbv/t: torch's loss_parallel backward, four fp32 tensors" if train.dtensor_loss else
               "8sbv/t: vocab-parallel softmax and gradient") + ")") if logits else ""
    lines = [
        Line("activations", one + extra,
             f"{form}{scale} per layer = {per_layer:,.0f} B x {offload.kept_layers(layers, lay)} layers"
             f"{f' (of {layers}: {lay.offload_activations} offloaded to host memory)' if lay.offload_activations else ''}"
             f"{'' if blocks is None else rank_note(lay, blocks, short=True)} + embedding/output "
             f"{extra:,.0f} B{loss} (b={b}, s={s}{f' = seq/cp={lay.cp}' if lay.cp > 1 else ''})"),
    ]
    own = layout_rank(lay)
    if own is not None and (own[2] or own[3]):
        lines.append(loss_stage_line(model, train, lay, b, s, fl, own[2], own[3]))
    if train.embed_norm and (own is None or own[1]):
        lines.append(embed_norm_line(model, train, lay, b, s, fl))
    if lay.recompute == "full":
        lines.append(working_set_line(model, train, lay, b, s))
    if lay.ep_overlap and lay.ep > 1 and model.moe_experts:
        lines.append(Line("EP overlap block", per_layer,
                          "the EP overlap runs one micro batch's forward beside another's backward block by block "
                          "(Megatron-Core's combined 1F1B, model_chunk_schedule_plan.py: the forward block whole "
                          f"before the backward block's attention frees): one block more at the peak = {per_layer:,.0f} B"))
    if train.fp8 != "none":
        sb = fp8.scale_line_bytes(model, train, lay)
        lines.append(Line("fp8 scales", sb, f"{train.fp8} scales of one micro batch's casts (fp8/cost.py)"))
    if lay.cp > 1 and lay.cp_impl in ("ulysses", "hybrid"):
        lines.append(a2a_line(model, train, lay, layers))
    if fl > 1:
        lines.append(Line("pipeline in-flight", one * (fl - 1),
                          f"{fl - 1:g} more micro batches x {one:,.0f} B ({lay.schedule}, p={lay.pp}, m={m})"))
    return lines


def loss_stage_line(model: ModelSpec, train: TrainSpec, lay: Layout, b: int, s: int, fl: float, mtp: int,
                    loss: int) -> Line:
    """Under a pipeline layout, what the rank holding the loss and the multi-token-prediction depths keeps beyond its
    blocks: each loss's logits while it runs backward (`logits_bytes`, one micro batch: the loss of one micro batch
    runs at a time), and each MTP depth's block of saved activations (an MoE block's, as DeepSeek-V3's depths are)
    for every micro batch in flight on the rank."""
    e = train.act_bytes_scale
    logits = logits_bytes(model, b, s, lay.tp, train.fused_loss, train.dtensor_loss) * e
    block = activation_bytes_per_layer(model, b, s, lay.tp, lay.sp, lay.recompute, flash=train.flash_attention,
                                       dropout=train.dropout, impl=train.llama_impl, fp8=train.fp8 != "none",
                                       modules=lay.recomputed_modules, moe_share=1.0) * e
    return Line("loss stage", (loss + mtp) * logits + mtp * block * fl,
                f"{loss + mtp} loss{'es' if loss + mtp > 1 else ''} x {logits:,.0f} B of logits"
                + (f" + {mtp} MTP depth{'s' if mtp > 1 else ''} x one block's {block:,.0f} B x {fl:g} micro batches "
                   "in flight" if mtp else "") + " (the rank holding them under pp_layout)")


def embed_norm_line(model: ModelSpec, train: TrainSpec, lay: Layout, b: int, s: int, fl: float) -> Line:
    """A LayerNorm on the embedding's output (BLOOM: `--embed-layernorm`, README "we use the added by us
    embedding layer norm"; bigscience-workshop/Megatron-DeepSpeed megatron/mpu/layers.py VocabParallelEmbedding:
    `self.norm` applied to the output after the tensor-parallel reduce): outside the checkpointed blocks
    (DeepSpeed's PipelineModule checkpoints only the transformer layers, pipe/module.py `_is_checkpointable`), so every micro batch in flight on the first stage
    keeps what a LayerNorm saves for backward: its 16-bit input (the embedding's output, whole after the
    vocab-parallel all-reduce, /t with sequence parallelism) and its fp32 mean and inverse deviation per token."""
    act = 2 * s * b * model.d_model / (lay.tp if lay.sp else 1) * train.act_bytes_scale
    stats = 8 * s * b
    return Line("embedding norm", (act + stats) * fl,
                f"(2sbh{'/t' if lay.sp else ''} + 8sb) x {fl:g} micro batches in flight = "
                f"{act + stats:,.0f} B x {fl:g} (the LayerNorm's 16-bit input and fp32 mean, rstd)")


def working_set_line(model: ModelSpec, train: TrainSpec, lay: Layout, b: int, s: int) -> Line:
    """Full recompute keeps each layer's input only, but backward runs one layer's forward again before its
    own backward: that layer holds its whole activations meanwhile (Chen et al. 2016's one segment in flight;
    torch.utils.checkpoint and FSDP's checkpoint wrapper alike), once per rank whatever the layer count."""
    one = activation_bytes_per_layer(model, b, s, lay.tp, lay.sp, "none", flash=train.flash_attention,
                                     dropout=train.dropout) * train.act_bytes_scale
    return Line("recompute working set", one,
                f"one layer's activations while backward recomputes it (as recompute=none) = {one:,.0f} B")


def a2a_line(model: ModelSpec, train: TrainSpec, lay: Layout, layers: int) -> Line:
    """Ulysses' all-to-all buffers (parallel/cp/cost.py): one layer's send and receive copies of q, k, v,
    and the replicated K/V heads' copies every layer saves for backward."""
    from shardlab.parallel.cp.checks import ulysses_degree
    from shardlab.parallel.cp.cost import a2a_buffer_bytes

    u = ulysses_degree(lay.cp_impl, lay.cp, lay.cp_ulysses)
    kv = max((model.n_kv_heads or model.n_head) // lay.tp, 1)
    e = 2 if train.mixed else 4
    got = a2a_buffer_bytes(train.micro_batch, train.seq or model.seq, model.n_head // lay.tp, kv,
                           model.d_model // model.n_head, u, lay.cp, e, layers)
    return Line("cp all-to-all buffers", got["transient"] + got["saved"],
                f"send + receive of q, k, v: 2*b*(s/cp)*d*(h+2g')/t*{e} = {got['transient']:,} B"
                + (f"; replicated K/V x {layers} layers {got['saved']:,} B" if got["saved"] else ""))


def buffer_line(model: ModelSpec, train: TrainSpec, lay: Layout) -> Line:
    """Communication buffers: two gradient buckets in flight (DDP/ZeRO-1/2), or ZeRO-3's gathered
    current + prefetched unit and one unit's unsharded gradient before its reduce-scatter."""
    us = units(model, lay.tp, lay.pp, lay.v)
    psi = sum(sum(u) for u in us)
    gb, pb = train.grad_bytes, train.param_bytes
    if lay.dp_cp == 1:
        return Line("comm buffers", 0, "no data-parallel collectives")
    if lay.strategy == "zero3":
        big = max(sum(u) for u in us)
        return Line("comm buffers", 2 * big * pb + big * gb,
                    f"2 gathered units x {pb} B + 1 unsharded unit gradient x {gb} B, largest unit {big:,}")
    bucket = min(lay.bucket_mb * MiB, psi * gb)
    return Line("comm buffers", 2 * bucket, f"2 buckets x min({lay.bucket_mb:g} MiB, {gb}*Psi)")


def context_line(train: TrainSpec) -> Line:
    """The CUDA context (the driver's state and the loaded kernel images) as nvidia-smi shows it: outside torch's
    allocator, so in a figure that measures the whole process ("device") and not in torch's allocated or reserved
    peaks (torch.cuda.memory_stats; torchtitan's max_reserved_gib). Its size is the row's source's own measurement
    (BigScience, train/tr11-176B-ml/chronicles-prequel.md: 1573 MiB on an A100, `torch.ones(1).cuda()` read in
    nvidia-smi, which also holds the allocator's first 2 MiB segment)."""
    return Line("CUDA context", train.cuda_context_mib * MiB,
                f"{train.cuda_context_mib:g} MiB, the process's CUDA context as the source measured it (nvidia-smi "
                "of torch.ones(1).cuda()): counted because the figure is nvidia-smi's (mem_measure=device)")


def largest_activation(model: ModelSpec, train: TrainSpec, lay: Layout) -> float:
    """An upper bound on one activation tensor's bytes: the attention scores b(a/t)s^2 where attention is not
    fused, the MLP's b·s·f/t, a whole b·s·h, the fp32 logits b·s·v/t where the rank computes the loss."""
    b, s, t = train.micro_batch, (train.seq or model.seq) // lay.cp, lay.tp
    e = 2 * train.act_bytes_scale
    f = model.ffn if model.llama else model.mlp_ratio * model.d_model
    out = [b * s * f / t * e, b * s * model.d_model * e]
    if not train.flash_attention:
        out.append(b * model.n_head / t * s * s * e)
    if lay.pp == 1:
        out.append(b * s * model.vocab / t * 4)
    return max(out)


def after_backward(buf: Line, acts: list[Line], segments: bool, largest: float) -> Line:
    """Buckets reduced after the backward (`overlap_grad_reduce` off: DeepSpeed's PipelineEngine reduces in its
    ReduceGrads instruction once the pipeline has drained, pipe/engine.py `_exec_reduce_grads`; apex's optimizer
    with overlap_grad_sync off) live when every activation has been freed: they raise the peak of live tensors only
    by what they exceed the activations by. A figure of segments (`segments`) counts a bucket larger than any
    activation tensor in full (`own_segment`)."""
    held = sum(ln.bytes for ln in acts)
    if segments and buf.bytes > largest:
        return own_segment(Line(buf.name, buf.bytes, f"{buf.formula} = {buf.bytes:,.0f} B"), largest,
                           "reduced after the backward")
    return Line(buf.name, max(0.0, buf.bytes - held),
                f"{buf.formula} = {buf.bytes:,.0f} B, reduced after the backward (not overlapped), when the "
                f"{held:,.0f} B of activations are freed: max(0, buckets - activations)")


def flat_cast_line(model: ModelSpec, train: TrainSpec, lay: Layout) -> Line:
    """The all-reduce's copy of the optimizer's flat fp32 gradient buffer in the wire dtype (`flat_grad_cast`):
    DeepSpeed's PipelineEngine reduces BF16_Optimizer.get_grads_for_reduction(), its flat groups, through
    engine.buffered_allreduce_fallback; a bucket closes once past 5e8 elements, so the first group, nearly every
    parameter, is a bucket alone; allreduce_bucket flattens it (one tensor: a view, torch's flatten_dense_tensors)
    and casts it with `.to(communication_data_type)`, a new tensor of the wire dtype (deepspeed/runtime/engine.py
    and bf16_optimizer.py at 15293139f and 5ea1c60f8). A wire dtype equal to the buffer's needs no copy."""
    psi = sum(first_rank_numels(model, lay))
    wire = DTYPE_BYTES[lay.comm_dtype] if lay.comm_dtype else train.grad_bytes
    nbytes = 0.0 if wire == train.grad_bytes else wire * psi
    return Line("comm buffers", nbytes, f"the flat gradient buffer cast to the wire dtype: {wire} B x Psi = "
                f"{wire} x {psi:,.0f}")


def hp_cast_line(model: ModelSpec, train: TrainSpec, lay: Layout) -> Line:
    """DeepSpeed BF16_Optimizer.update_hp_grads (`hp_grad_cast`; runtime/bf16_optimizer.py at 15293139f and
    5ea1c60f8: `hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))`) casts each parameter's 16-bit gradient to a new
    fp32 tensor before adding it, one parameter at a time, right after each micro batch's backward. The largest
    (the first stage's word embedding, v/t x h) is live once that micro batch's stored layer inputs and the
    recompute working set are freed, beside every other micro batch in flight: it raises the peak of live tensors
    by what it exceeds them by, and a figure of segments by all of it (`own_segment`)."""
    big = 4 * max(first_rank_numels(model, lay))
    per_layer, layers = stored_per_layer(model, train, lay)
    freed = per_layer * layers
    if lay.recompute == "full":
        b, s = train.micro_batch, (train.seq or model.seq) // lay.cp
        freed += working_set_line(model, train, lay, b, s).bytes
    line = Line("16-bit grad's fp32 cast", big, f"4 B x the largest parameter {big / 4:,.0f} = {big:,.0f} B")
    largest = largest_activation(model, train, lay)
    if counts_segments(train) and big > largest:
        return own_segment(line, largest, "made after a micro batch's backward")
    return Line(line.name, max(0.0, big - freed), f"{line.formula}, made after a micro batch's backward has freed "
                f"its {freed:,.0f} B (stored inputs, recompute working set): max(0, cast - freed)")


def counts_segments(train: TrainSpec) -> bool:
    """Whether the memory figure counts the caching allocator's segments (reserved, nvidia-smi), not live tensors."""
    return train.mem_measure != "allocated"


def own_segment(line: Line, largest: float, when: str) -> Line:
    """A transient counted in full in a figure of the caching allocator's segments (torch's reserved memory,
    nvidia-smi): torch's allocator (c10/cuda/CUDACachingAllocator.cpp) places a request in one free block of one
    segment, merges freed blocks only within their segment, and cudaMallocs a large request's segment at its own
    rounded size, so the blocks activations free are each at most the largest activation tensor (`largest`) and a
    bigger request takes a segment of its own, which the allocator keeps."""
    return Line(line.name, line.bytes,
                f"{line.formula}, {when}, into a segment of its own: larger than any freed activation block (at "
                f"most {largest:,.0f} B), the caching allocator cannot place it there, and the figure counts segments")


def memory_lines(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Line]:
    """The peak memory's lines: the first pipeline rank's (the embedding, the most micro batches in flight), or
    under a pipeline layout (`pp_layout`, whose ranks hold different blocks and ends) the largest rank's (one rank's
    where `lay` is that rank's, a RankLayout)."""
    if lay.pp == 1 or not lay.pp_layout or isinstance(lay, RankLayout):
        return _rank_lines(model, train, lay, m)
    base = {f.name: getattr(lay, f.name) for f in fields(Layout)}
    ranks = [_rank_lines(model, train, RankLayout(**base, pp_rank=r), m) for r in range(lay.pp)]
    totals = [sum(ln.bytes for ln in lines) for lines in ranks]
    r = max(range(lay.pp), key=totals.__getitem__)
    return ranks[r] + [Line(PEAK_RANK, 0.0, f"rank {r} of {lay.pp}, the largest under pp_layout (each rank's "
                                                  f"total: {', '.join(f'{t / 2**30:.1f}' for t in totals)} GiB)")]


def _rank_lines(model: ModelSpec, train: TrainSpec, lay: Layout, m: int) -> list[Line]:
    acts = activation_lines(model, train, lay, m)
    buf = flat_cast_line(model, train, lay) if train.flat_grad_cast and lay.dp_cp > 1 else \
        buffer_line(model, train, lay)
    if not lay.overlap_grad_reduce and lay.strategy != "zero3" and buf.bytes:
        buf = after_backward(buf, acts, counts_segments(train), largest_activation(model, train, lay))
    if train.hp_grad_cast:
        acts = acts + [hp_cast_line(model, train, lay)]
    lines = state_lines(model, train, lay) + acts + [buf]
    if train.mem_measure == "device":
        lines.append(context_line(train))
    return lines
