"""What torch's DTensor tensor parallelism (`tp_impl=dtensor`: `parallelize_module`, as torchtitan applies it)
sends beyond comm.py's Megatron count of the sequence-parallel regions, from the sources of the runs:

- selective-op recompute (torchtitan's op-level policy) reruns the regions' forward all-gathers in the
  backward: its save list (`_save_list`, `models/llama3/parallelize_llama.py` at e7c0cae, the same at 9dec370)
  names `_c10d_functional.reduce_scatter_tensor` and no all-gather, and every op not saved is recomputed
  (PREFER_RECOMPUTE, which torch's min-cut partitioner treats as must-recompute under compile too:
  `torch/_functorch/partitioners.py`, `must_recompute`); the gathered input of q, k, v and of w1, w3 is needed by their weight gradients, so the
  block's two all-gathers run again, its reduce-scatters do not. (comm.py's `rerun` is for full and shardlab's
  selective recompute, which rerun both.)
- float8 tensorwise (`train.fp8=tensorwise`): torchtitan applies torchao's `Float8ColwiseParallel`,
  `Float8RowwiseParallel` and `PrepareFloat8ModuleInput` (`enable_float8_tensorwise_tp`: "float8 all-gather
  with TP is only supported for tensorwise float8 scaling recipes. For rowwise recipes, we use regular TP and
  all-gather happens in high precision"). `PrepareFloat8ModuleInput` casts the region's input to float8 before
  its Shard(1) -> Replicate redistribute, so the forward all-gather moves 1 B an element; the row-parallel
  output's `NoopFwToFloat8BwDynamic` runs after its redistribute, so in the backward the gradient is cast
  first and the all-gather (the reduce-scatter's backward) moves float8 too. The reduce-scatters stay 16-bit
  (a partial sum; torchao `float8/float8_tensor_parallel.py` at 6243040). Each such cast of a DTensor agrees
  its amax over the TP group first (`tensor_to_amax`: a max over a sharded DTensor, one all-reduce of 4 B):
  the two region inputs per forward (and their rerun), and in the backward the two row-parallel output
  gradients and the five column-parallel ones (q, k, v, w1, w3: `Float8ColwiseParallel._prepare_output_fn`).
The embedding's and the head's collectives stay 16-bit (not converted).
- the sequence dimension's copies: torch's functional collectives gather and scatter along dim 0 of a flat buffer,
  and DTensor's Shard(1) -> Replicate (the region's input) and Partial -> Shard(1) (its output) run them on the
  sequence dimension of a (batch, sequence, hidden) activation: `all_gather_tensor` with gather_dim 1 follows the
  all-gather with `torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)`, and `reduce_scatter_tensor` with
  scatter_dim 1 makes its input contiguous per rank with `torch.cat(torch.chunk(...))` first (torch
  `distributed/_functional_collectives.py`). torch of 2026 (`_maybe_view_chunk_cat`, the pinned 2.13 has it) returns
  a view for the gather when the micro batch is 1, so the plan counts no gather copy there; the published rows all
  have batches above 1 and torch of 2024-25. Each copy reads and writes the whole gathered activation, on the
  compute stream, and under compile too (a cat between a collective and a GEMM, an extern kernel, has no pointwise
  neighbour to fuse into). torchtitan's pytorch/torchtitan#437 measured two of them at 0.18 ms of 3 ms of FFN
  compute on an H100 (8k tokens, batch 1). Per block and micro batch: each region's input gathered (2; their
  backward, a reduce-scatter of the gradient: 2) and output scattered (2; backward, a gather: 2), the gathers rerun
  where the recompute reruns them; `cat_copies`.
"""
from __future__ import annotations

from .ops import COLUMN_PARALLEL, ROW_PARALLEL, Op

COLWISE_OUT = 5  # q, k, v, w1, w3: the column-parallel linears whose output gradient is cast (tensorwise)


def applies(lay) -> bool:
    return lay.tp > 1 and lay.sp and getattr(lay, "tp_impl", "own") == "dtensor"


def rerun_gathers(lay) -> bool:
    """torchtitan's op-level policy reruns the block's two forward all-gathers (module docstring)."""
    return applies(lay) and lay.recompute == "selective-op"


def float8_gathers(train, lay) -> bool:
    return applies(lay) and getattr(train, "fp8", "none") == "tensorwise"


def sp_all_gather(train, lay, layers: int, m: int, act: float, n: int) -> tuple[float, int, str]:
    """(payload, calls, why) of the sequence-parallel all-gathers: comm.py's n calls of `act` bytes, plus the
    rerun ones, the block's at 1 B an element under float8 tensorwise."""
    extra = 2 * layers * m if rerun_gathers(lay) else 0
    calls = n + extra
    if not float8_gathers(train, lay):
        why = f" + {extra} rerun by selective-op recompute (torchtitan's save list: no all-gather)" if extra else (
            "; DTensor TP (tp_impl=dtensor) as the own count here: its extra gathers come with selective-op "
            "recompute or float8 tensorwise" if applies(lay) else "")
        return act * calls, calls, why
    e = 2 if train.mixed else 4
    edge = 2 * m  # the embedding's and the head's: 16-bit
    f8 = (calls - edge) * act / e
    why = (f"{' + ' + str(extra) + ' rerun by selective-op recompute' if extra else ''}; the block's "
           f"{calls - edge} in float8 (torchao's Float8ColwiseParallel: 1 B an element)")
    return f8 + act * edge, calls, why


def amax_calls(train, lay, layers: int, m: int) -> int:
    """All-reduces of one fp32 amax over the TP group per step under float8 tensorwise (module docstring)."""
    if not float8_gathers(train, lay):
        return 0
    fwd = 2 * (2 if (rerun_gathers(lay) or lay.recompute == "full") else 1)
    return (fwd + 2 + COLWISE_OUT) * layers * m


# the copies' op names: recompute.py keeps the scatter's out of torchtitan's selective-op rerun (the reduce-scatter's
# output is saved) and lets it follow the block's last GEMM under the checkpoint's early stop
GATHER_CAT, SCATTER_CAT = "tp_gather_cat", "tp_scatter_cat"


def cat_copies(block: list, train, lay, b: int, s: int, h: int, e: int) -> list:
    """The block's ops with DTensor's sequence-dim copies in place (module docstring): before each region's first
    column-parallel GEMM the input's gather copy (its backward: the gradient's scatter copy), after each
    row-parallel GEMM the output's scatter copy (backward: the gradient's gather copy), b x s tokens of width h
    each, e B an element; under float8 tensorwise the gathers move 1 B an element; a gather of one sequence is a
    view (module docstring). Unchanged where DTensor TP with SP does not apply."""
    if not applies(lay):
        return block
    T = b * s
    g = 0 if b == 1 else 1 if float8_gathers(train, lay) else e  # bytes an element of a gather's copy
    gather = Op(GATHER_CAT, "elem", bytes=2 * T * h * g, ew="copy", bwd_bytes=2 * T * h * e)
    scatter = Op(SCATTER_CAT, "elem", bytes=2 * T * h * e, ew="copy", bwd_bytes=2 * T * h * g)
    region = {name: i for i, names in enumerate(COLUMN_PARALLEL) for name in names}
    out, entered = [], set()
    for o in block:
        if o.kind == "gemm" and o.name in region and region[o.name] not in entered:
            entered.add(region[o.name])  # the region's first column-parallel GEMM reads the gathered input
            out.append(gather)
        out.append(o)
        if o.kind == "gemm" and o.name in ROW_PARALLEL:
            out.append(scatter)
    return out
