"""Rank-side helpers for the tensor-parallel tests: every rank builds the same single-device GPT, keeps a copy
as the reference, splits the other with own or DTensor TP (the TP group is the whole world) and runs both on
the same batch. Returns what the tests compare (full logits, losses, gradients, parameters, comm records)."""
from __future__ import annotations

import copy
import zlib

import torch
import torch.nn.functional as F

# Heads, hidden, MLP and sequence divisible by 2; vocabulary 256 (even) unless a test pads it.
TINY = dict(n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=16)
BATCH = 2

_MESHES = {}


def tp_mesh(dp: int = 1):
    """A (tp,) mesh over the world, or (dp, tp); one of each per worker process (a mesh creates groups)."""
    if dp not in _MESHES:
        from torch.distributed.device_mesh import init_device_mesh

        from shardlab import comm
        tp = comm.world_size() // dp
        _MESHES[dp] = (init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",)) if dp == 1 else
                       init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp")))
    return _MESHES[dp]


def build(impl: str, sp: bool, model_kw: dict = TINY, dtype=torch.float32, dp: int = 1):
    """(reference model, TP model), both from seed 0."""
    from shardlab.model.gpt import build_model
    from shardlab.parallel.tp import own as tp
    from shardlab.parallel.tp import dtensor as tp_dtensor
    from zero_harness import model_config

    ref = build_model(model_config(model_kw), seed=0).to(dtype)
    model = copy.deepcopy(ref)
    layer = (tp.apply_tp if impl == "own" else tp_dtensor.apply_tp)(model, tp_mesh(dp), sp=sp)
    model.tp = layer  # the harness's shortcut to the layer's object (the composition keeps it on its handle)
    return ref, model


def batch(model_kw: dict, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, model_kw["vocab_size"], (BATCH, model_kw["max_seq_len"] + 1), generator=gen)
    return x[:, :-1], x[:, 1:]


def ref_loss(logits, targets):
    """shardlab.model.loss.cross_entropy ("sum"), but keeping float64 when the model is float64."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return F.cross_entropy(logits.to(dtype).reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum")


def tp_step(model, idx, tgt):
    """Forward, loss (mean over tokens, as the trainer normalises) and backward the way the composition
    will run it: inside the TP layer's loss context, then its finish_backward."""
    with model.tp.loss_context():
        logits = model(idx)
        loss = model.tp.loss_fn(logits, tgt, "sum") / tgt.numel()
        loss.backward()
    model.tp.finish_backward()
    return logits, loss


def parity(impl: str, sp: bool, model_kw: dict = TINY, dtype: str = "fp32", steps: int = 3) -> dict | None:
    """Logits, loss, gradients and grad norm of the first step, then the losses of `steps` AdamW steps
    and the final parameters: TP (gathered) next to the single-device reference. Rank 0 returns them."""
    from shardlab import comm

    dt = {"fp32": torch.float32, "fp64": torch.float64}[dtype]
    ref, model = build(impl, sp, model_kw, dt)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, foreach=False) for m in (ref, model)]
    out = {"losses": [], "ref_losses": []}
    for step in range(steps):
        idx, tgt = batch(model_kw, seed=step)
        r_logits = ref(idx)
        r_loss = ref_loss(r_logits, tgt) / tgt.numel()
        r_loss.backward()
        logits, loss = tp_step(model, idx, tgt)
        if step == 0:
            out["grads_placed"] = all(getattr(p.grad, "placements", None) == getattr(p, "placements", None)
                                      for p in model.parameters())
            out["logits"] = (model.tp.gather_logits(logits), r_logits.detach())
            out["grads"] = (model.tp.full_grads(), {n: p.grad.clone() for n, p in ref.named_parameters()})
            out["norm"] = (float(model.tp.grad_norm()),
                           float(torch.cat([p.grad.double().reshape(-1) for p in ref.parameters()]).norm()))
        out["losses"].append(loss.item())
        out["ref_losses"].append(r_loss.item())
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    out["params"] = (model.tp.full_parameters(), {n: p.detach().clone() for n, p in ref.named_parameters()})
    out["tied"] = model.lm_head.weight is model.wte.weight
    out["local_numel"] = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    return out if comm.rank() == 0 else None


def records(sp: bool, model_kw: dict = TINY) -> list[dict]:
    """One forward + backward of own TP: this rank's comm records (op, tag, phase, payload bytes, wire)."""
    from shardlab import comm

    _, model = build("own", sp, model_kw)
    idx, tgt = batch(model_kw, seed=0)
    first = comm.RECORDER.order
    comm.set_phase("forward")
    logits = model(idx)
    loss = model.tp.loss_fn(logits, tgt, "sum")
    comm.set_phase("backward")
    loss.backward()
    comm.set_phase("step")
    model.tp.finish_backward()
    comm.set_phase("idle")
    return [dict(op=r.op, tag=r.tag, phase=r.phase, bytes=r.bytes, wire=r.wire_bytes)
            for r in comm.RECORDER.ring if r.order > first]


def dtensor_collectives(sp: bool, model_kw: dict = TINY) -> dict:
    """DTensor TP's collectives in one forward and one backward: the functional collectives DTensor issues,
    counted by a dispatch mode (torch's CommDebugMode does the same but trips over the model's hooks)."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace in ("_c10d_functional", "c10d"):
                self.ops[func._opname.rstrip("_")] += 1
            return func(*args, **(kwargs or {}))

    _, model = build("dtensor", sp, model_kw)
    idx, tgt = batch(model_kw, seed=0)
    counts = {}
    with model.tp.loss_context():
        with Count() as mode:
            loss = model.tp.loss_fn(model(idx), tgt, "sum")
        counts["forward"] = dict(mode.ops)
        with Count() as mode:
            loss.backward()
        counts["backward"] = dict(mode.ops)
    return counts


def dropout_streams(sp: bool) -> dict:
    """With dropout on: a fingerprint of the generator state each dropout draws from (attention's SDPA,
    the blocks' residual dropout), and the residual stream entering ln_f."""
    from shardlab.model import gpt

    kw = dict(TINY, dropout=0.1)
    _, model = build("own", sp, kw)
    seen = {"sdpa": [], "drop": []}

    def fingerprint():
        return zlib.crc32(torch.get_rng_state().numpy().tobytes())

    real_sdpa = gpt.F.scaled_dot_product_attention

    def sdpa(*a, **k):
        seen["sdpa"].append(fingerprint())
        return real_sdpa(*a, **k)

    for block in model.blocks.values():
        block.drop.register_forward_pre_hook(lambda m, a: seen["drop"].append(fingerprint()))
    resid = []
    model.ln_f.register_forward_pre_hook(lambda m, a: resid.append(a[0].detach().clone()))
    idx, _ = batch(kw, seed=0)
    torch.manual_seed(7)  # the default stream: alike on every TP rank
    gpt.F.scaled_dot_product_attention = sdpa
    try:
        model.train()
        model(idx)
    finally:
        gpt.F.scaled_dot_product_attention = real_sdpa
    return {**seen, "resid": resid[0]}


def dropout_recompute(sp: bool) -> dict:
    """With dropout on, the same step with and without activation recompute (torch.utils.checkpoint per
    block): the sharded-region masks must replay, so gradients agree exactly."""
    from torch.utils.checkpoint import checkpoint

    kw = dict(TINY, dropout=0.1)
    grads = []
    for recompute in (False, True):
        _, model = build("own", sp, kw)
        if recompute:
            for block in model.blocks.values():
                block.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(block.forward)
        idx, tgt = batch(kw, seed=0)
        torch.manual_seed(7)
        model.train()
        tp_step(model, idx, tgt)
        grads.append(model.tp.full_grads())
    return {"plain": grads[0], "recompute": grads[1]}


def checkpoint_roundtrip(path: str, model_kw: dict) -> dict:
    """Own TP saves its DTensor state dict with DCP after one step; it is loaded back into a plain full
    state dict (single device), into a fresh own-TP model and into a DTensor-TP model."""
    import torch.distributed.checkpoint as dcp

    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel.tp import dtensor as tp_dtensor

    _, model = build("own", False, model_kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    idx, tgt = batch(model_kw, seed=0)
    tp_step(model, idx, tgt)
    opt.step()
    saved = model.tp.full_parameters()
    sd = model.tp.state_dict()
    layout = {k: (type(v).__name__, tuple(v.shape), str(getattr(v, "placements", "")),
                  tuple(v.to_local().shape) if hasattr(v, "to_local") else None) for k, v in sd.items()}
    dcp.save(sd, checkpoint_id=path)

    single = build_model(GPTConfig(**model_kw), seed=1)
    plain = single.state_dict()
    dcp.load(plain, checkpoint_id=path)

    _, own = build("own", False, dict(model_kw))
    for p in own.parameters():
        p.data.zero_()
    own_sd = own.tp.state_dict()
    dcp.load(own_sd, checkpoint_id=path)
    own.tp.load_state_dict(own_sd)

    dt = tp_dtensor.apply_tp(build_model(GPTConfig(**model_kw), seed=1), tp_mesh(), sp=False)
    dt_sd = dt.state_dict()
    dcp.load(dt_sd, checkpoint_id=path)
    dt.load_state_dict(dt_sd)
    return {"saved": saved, "single": {k: v for k, v in plain.items()}, "own": own.tp.full_parameters(),
            "dtensor": dt.full_parameters(), "layout": layout,
            "padding_zero": bool((own.wte.weight.detach()[own.wte.real_rows:] == 0).all())}


def reshard_across_degrees(path: str, model_kw: dict) -> dict:
    """World 4. Own TP at tp=4 trains two steps (AdamW) next to a single-device reference and saves model and
    optimizer with DCP; own TP at tp=2 (on a 2 x 2 (dp, tp) mesh) loads both; one more step on each side.
    Returns the full parameters and first moments saved and loaded, and the next step's loss next to the
    reference's."""
    import torch.distributed.checkpoint as dcp

    from shardlab import comm

    def adamw(params):
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, foreach=False)

    def step(ref, model, opts, seed):
        idx, tgt = batch(model_kw, seed=seed)
        r_loss = ref_loss(ref(idx), tgt) / tgt.numel()
        r_loss.backward()
        _, loss = tp_step(model, idx, tgt)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.item(), r_loss.item()

    ref, model = build("own", False, model_kw)
    opts = [adamw(ref.parameters()), adamw(model.parameters())]
    for s in range(2):
        step(ref, model, opts, s)
    dcp.save({"model": model.tp.state_dict(), "optim": model.tp.optim_state_dict(opts[1])}, checkpoint_id=path)
    pos = {id(p): n for n, p in model.named_parameters()}
    saved = {"params": model.tp.full_parameters(),
             "exp_avg": {pos[id(p)]: model.tp.full(pos[id(p)], st["exp_avg"]) for p, st in opts[1].state.items()}}

    _, model2 = build("own", False, model_kw, dp=2)
    opt2 = adamw(model2.parameters())
    step(copy.deepcopy(ref), model2, [opt2], 99)  # creates the optimizer state to load into
    sd = {"model": model2.tp.state_dict(), "optim": model2.tp.optim_state_dict(opt2)}
    dcp.load(sd, checkpoint_id=path)
    model2.tp.load_state_dict(sd["model"])
    model2.tp.load_optim_state_dict(opt2, sd["optim"])
    params = model2.tp.full_parameters()
    pos = {id(p): n for n, p in model2.named_parameters()}
    exp_avg = {pos[id(p)]: model2.tp.full(pos[id(p)], st["exp_avg"]) for p, st in opt2.state.items()}
    steps = {float(st["step"]) for st in opt2.state.values()}
    next_loss, next_ref = step(ref, model2, [opts[0], opt2], 2)
    return {"saved": saved, "loaded": {"params": params, "exp_avg": exp_avg}, "steps": steps,
            "next": (next_loss, next_ref), "rank": comm.rank()}


# --- through the composition (shardlab.parallel.build), as the trainer runs it ---------------------------

COMPOSED = ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4", "train.lr=0.001",
            "train.grad_clip=1.0", "ckpt.final=false"]


def composed(overrides: list[str], steps: int = 3, every_rank: bool = False) -> dict | None:
    """`steps` steps of `parallel.build(cfg)`'s Parallel the way the trainer drives it (forward_backward,
    finish, clip, optimizer step) on the same global batches at any layout: each data-parallel rank takes
    its rows. Rank 0 returns the global losses, the clipped gradient norms, the full parameters and what
    the model state dict holds per name (DTensor or not, global shape)."""
    from shardlab import comm
    import step_driver as driver

    cfg, par = driver.build(overrides, COMPOSED)
    dims = par.dims
    out = driver.train(par, cfg, steps)
    out["params"] = {k: v.detach().clone() for k, v in par.full_parameters().items()}
    if every_rank:  # this rank's own pieces and copies, and where it sits on the (dp, tp) mesh
        out["local"] = {k: v.detach().clone() for k, v in par.model.named_parameters()}
        out["coord"] = (dims.dp_rank, par.layer("tp").impl.rank)
        return out
    try:
        sd = par.model_state_dict()
        out["state"] = {k: (hasattr(v, "placements"), tuple(v.shape)) for k, v in sd.items()}
    except NotImplementedError as e:
        out["state"] = str(e)
    return out if comm.rank() == 0 else None
