"""FSDP2's own kernels around its collectives (torch's `fully_shard`, torchtitan's data parallelism): the
memory-bound copies per-parameter sharding needs, which shardlab's flat-buffer ZeRO does not run the same way.

Read in torch's code (torch/distributed/_composable/fsdp/_fsdp_collectives.py and _fsdp_param_group.py in
2024; torch/distributed/fsdp/_fully_shard/ since torch 2.6) and the pull requests that set them:

  all-gather copy-in  on the copy-in stream (high priority), per gather: the fp32 shards cast to the gather
                      dtype into a temporary, then copied into the rank's slice of the flat all-gather buffer
                      (`all_gather_copy_in`, `_foreach_copy_`): two passes, both at every version of the runs
                      (pytorch#118223: the foreach copy from fp32 "consists of ... dst.copy_(src.to(bf16))";
                      pytorch#133369 made the cast an explicit foreach copy into a flat temporary, two copies
                      still). Bytes: 4 (fp32 read) + e (write) + e + e per shard element, e the gathered dtype's
                      bytes (float8 all-gather: torchao's cast in `fsdp_pre_all_gather`, 1 B).
  all-gather copy-out on the compute stream after the wait (`foreach_all_gather_copy_out`:
                      `split_with_sizes_copy` of the gathered buffer into the unsharded parameters): every
                      gathered byte read and written, each gather (the backward's again under
                      reshard_after_forward).
  reduce-scatter      the unsharded 16-bit gradients packed into the flat reduce-scatter input in the reduce
  copy-in             dtype (`torch.cat` with out= in 2024-04; `_chunk_cat` later, widening bf16 -> fp32 in the
                      same pass): e_grad read + e_reduce written per element, each micro batch. The compute
                      stream runs it (pytorch#129721, June 2024) or, before, waits for it on the reduce-scatter
                      stream (`current_stream.wait_event(copy_in_event)`): exposed at both.
  division            none for fp32 and bf16 reductions: NCCL's ReduceOp.AVG divides inside the collective
                      (pytorch#120919 for fp32, February 2024; pytorch#123362 for bf16); fp16 keeps a pre-divide
                      of the input and a post-divide of the shard (8 B / 4 B an element).
  post-reduce         on the reduce-scatter stream: the shard cast back to fp32 where the reduce dtype is not
                      fp32 (e_reduce + 4 B), and `grad += new` from the second micro batch on (12 B).

The compute stream's kernels (copy-out, reduce-scatter copy-in) are exposed. The copy-in and post-reduce
streams' kernels run beside the compute, but each is a kernel of its own whose blocks take every SM as they
free up (FSDP2 gives those streams high priority), unlike NCCL's few CTAs: a memory-bound kernel's time there
is taken from the compute it overlaps, so they are counted in full too (shown apart in --explain). Every
kernel at the achieved HBM bandwidth of one call's bytes (Cluster.hbm_at), as the plan's other elementwise
kernels. Only on GPU presets (a calibrated profile measures its copies: step._zero_copies) and only where the
layout says the run used FSDP2 (`Layout.zero3_impl = "fsdp2"`, a published row's input); in its place, not
beside, shardlab's flat-buffer copies.
"""
from __future__ import annotations

from dataclasses import dataclass

from .geometry import padded_units
from .hardware import Cluster
from .layout import Layout
from .train_spec import TrainSpec
from .model import ModelSpec

MASTER = 4  # the sharded parameters (and their gradients) are fp32 under torchtitan's mixed precision


@dataclass(frozen=True)
class Fsdp2Kernels:
    copy_out: float  # seconds per step, compute stream
    rs_copy_in: float  # compute stream (or waited for)
    ag_copy_in: float  # copy-in stream
    post_reduce: float  # reduce-scatter stream: casts, accumulation, fp16's divisions
    why: str

    @property
    def seconds(self) -> float:
        return self.copy_out + self.rs_copy_in + self.ag_copy_in + self.post_reduce


def applies(lay: Layout, cluster: Cluster) -> bool:
    return lay.strategy == "zero3" and lay.zero3_impl == "fsdp2" and not cluster.gemm_table \
        and not cluster.gemm_fit and lay.dp_cp > 1


def kernels(model: ModelSpec, train: TrainSpec, lay: Layout, cluster: Cluster, comm, m: int) -> Fsdp2Kernels | None:
    """FSDP2's kernels per step on this rank, from the plan's shard-group all-gather and reduce-scatter
    (`comm`: step.CommLine list); None where the term does not apply."""
    if not applies(lay, cluster):
        return None
    sg = "dp_shard" if lay.replicate > 1 else "dp"
    ag = next((cl.c for cl in comm if cl.c.group == sg and cl.c.op == "all_gather"), None)
    rs = next((cl.c for cl in comm if cl.c.group == sg and cl.c.op == "reduce_scatter"), None)
    if ag is None or rs is None:
        return None
    n = lay.shard
    full, _ = padded_units(model, lay.tp, lay.pp, lay.v, n, lay.padding)
    e_red = rs.payload / (m * full)  # the reduce dtype's bytes
    e_grad = train.param_bytes  # the unsharded gradient is the unsharded (16-bit) parameter's dtype
    gathered = ag.payload  # bytes gathered per step (float8 weights at 1 B where gathered in float8)
    elems = _gathered_elements(model, lay, m, full)
    cast = MASTER if train.param_bytes != MASTER else 0  # no cast where the parameters are fp32 already
    b_out = 2 * gathered
    b_in = (cast * elems + (3 if cast else 2) * gathered) / n
    b_rs = m * full * e_grad + rs.payload
    shard = full / n
    # the reduce dtype: the layout's, else the gradient's; fp16 alone keeps FSDP2's pre/post-divide kernels
    fp16 = (lay.comm_dtype or ("fp16" if train.precision.startswith("fp16") and e_red == 2 else "")) == "fp16"
    b_post = (m * MASTER * shard if e_red != MASTER else 0) + (m - 1) * 3 * MASTER * shard \
        + (m * (2 * e_red * full + 2 * e_red * shard) if fp16 else 0)
    ag_call = gathered / ag.calls
    speed = cluster.compute_speed(lay.world)
    t = [b / cluster.hbm_at(b / c) / speed if b else 0.0
         for b, c in ((b_out, ag.calls), (b_rs, rs.calls), (b_in, ag.calls), (b_post, rs.calls))]
    why = (f"FSDP2's own kernels (torch fully_shard; in place of the flat-buffer copies): all-gather copy-out "
           f"{t[0] * 1e3:.3f} ms (split_with_sizes_copy on the compute stream: 2 x {gathered / 1e9:.2f} GB, "
           f"{ag_call / 1e6:.0f} MB a gather) + reduce-scatter copy-in {t[1] * 1e3:.3f} ms (chunk_cat of the "
           f"{e_grad}-B gradients into the {e_red:g}-B input: {b_rs / 1e9:.2f} GB, waited for by the compute) "
           f"+ all-gather copy-in {t[2] * 1e3:.3f} ms (copy-in stream: the {MASTER}-B shards cast, then copied "
           f"into the flat input, {b_in / 1e9:.2f} GB) + post-reduce {t[3] * 1e3:.3f} ms (reduce-scatter stream: "
           f"cast back to fp32, accumulation over {m} micro batches{', fp16 pre/post-divide' if fp16 else ''}; "
           f"no division kernel for fp32/bf16: ReduceOp.AVG); the side streams' kernels counted in full (they "
           f"take the SMs of the compute they overlap); each at the achieved HBM bandwidth of one call's bytes")
    return Fsdp2Kernels(*t, why)


def _gathered_elements(model: ModelSpec, lay: Layout, m: int, full: int) -> float:
    """Elements gathered per step, as plan/comm.py issues the gathers: every unit before the forward, all
    but the root again before the backward under reshard_after_forward, each micro batch."""
    _, unit_full = padded_units(model, lay.tp, lay.pp, lay.v, lay.shard, lay.padding)
    bwd = sum(unit_full[1:]) + (unit_full[0] if lay.root_reshards else 0) if lay.reshard_after_forward else 0
    return m * (full + bwd)
