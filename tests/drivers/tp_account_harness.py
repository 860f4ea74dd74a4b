"""Rank-side helpers for the tensor-parallel accounting tests: a model split by the composition the trainer
uses (`shardlab.parallel.build`), trained a step or two; what comm recorded, what each rank holds, what the
doctor and the trace say."""
from __future__ import annotations

import torch

TINY = dict(n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=16)
BATCH = 2


def build(tp: int = 2, sp: bool = False, impl: str = "own", dp: str = "single", model_kw: dict = TINY):
    """The composition at this world: `tp` TP ranks x (world / tp) ranks of the `dp` layer."""
    from shardlab.config import Config
    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel import build as build_parallel

    cfg = Config()
    cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = model_kw["max_seq_len"], 1.0, False
    cfg.parallel.strategy, cfg.parallel.tp, cfg.parallel.tp_impl, cfg.parallel.sp = dp, tp, impl, sp
    model = build_model(GPTConfig(**model_kw), seed=0)
    return cfg, build_parallel(cfg, torch.device("cpu"), model)


def batch(par, seed: int, model_kw: dict = TINY):
    """BATCH sequences per data-parallel rank (the TP ranks of a group read the same ones)."""
    gen = torch.Generator().manual_seed(1000 * seed + par.dims.dp_rank)
    x = torch.randint(0, model_kw["vocab_size"], (BATCH, model_kw["max_seq_len"] + 1), generator=gen)
    return x[:, :-1], x[:, 1:]


def step(par, seed: int, model_kw: dict = TINY, zero_grad: bool = True) -> None:
    x, y = batch(par, seed, model_kw)
    par.forward_backward([(x, y)], 1.0 / y.numel())
    par.finish()
    par.clip_grad_norm_(1.0)
    par.optimizer_step()
    if zero_grad:
        par.zero_grad()


def recorded_bytes(sp: bool, dp: str = "single") -> dict:
    """Payload bytes by op that comm recorded in the second step (the first builds lazy state); tp=2 under
    the `dp` layer on the rest of the world."""
    from shardlab import comm

    _, par = build(sp=sp, dp=dp)
    step(par, 0)
    comm.RECORDER.reset_step()
    step(par, 1)
    return {op: b for op, b in comm.RECORDER.step_stats()["bytes"].items() if b}


def held_bytes(model_kw: dict) -> dict:
    """Bytes this rank really holds after a step, before zero_grad: parameters, their .grad tensors and
    AdamW's state tensors; and the split / whole element counts."""
    _, par = build(model_kw=model_kw)
    step(par, 0, model_kw, zero_grad=False)
    params = list(par.module.parameters())

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    opt = [v for st in par.optimizer.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0]
    split = sum(p.numel() for n, p in par.module.named_parameters() if par.layer("tp").impl.is_sharded(n))
    return {"params": nbytes(params), "grads": nbytes(p.grad for p in params if p.grad is not None),
            "optimizer": nbytes(opt), "split_numel": split,
            "whole_numel": sum(p.numel() for p in params) - split, "reported": par.state_bytes()}


def doctor_checksums(run_dir: str, sp: bool, corrupt_rank: int, param: str) -> dict:
    """Two steps of own TP (tp = world), the doctor's checksum; then `param` nudged on `corrupt_rank`
    only, the checksum again. Returns both results and the doctor's text for the second."""
    from shardlab import comm
    from shardlab.doctor import checksum as checksum_mod
    from shardlab.doctor.core import Doctor

    cfg, par = build(sp=sp)
    cfg.doctor.hang_timeout_s = 0  # no watchdog thread
    doctor = Doctor(cfg, run_dir, par.dp, comm.rank(), comm.world_size(), replica_sets=par.replica_sets())
    try:
        for s in range(2):
            step(par, s)
        healthy = doctor.checksum(1)
        if comm.rank() == corrupt_rank:
            with torch.no_grad():
                dict(par.module.named_parameters())[param].view(-1)[0] += 1e-3
        broken = doctor.checksum(2)
    finally:
        doctor.close(final_checksum=False)
    return {"healthy": healthy, "broken": broken, "text": checksum_mod.describe(broken)}


def traced_steps(run_dir: str, tp: int, steps: int = 4) -> None:
    """A traced tp x dp run (own TP under own ddp): the trainer's spans around the composition's step."""
    from shardlab import comm
    from shardlab.observe import timeline

    timeline.enable(run_dir, comm.rank())
    _, par = build(tp=tp, dp="ddp")
    for s in range(steps):
        comm.RECORDER.step = s
        with timeline.span("step", cat="step", step=s):
            x, y = batch(par, s)
            par.forward_backward([(x, y)], 1.0 / y.numel())
            par.finish()
            with timeline.span("optimizer", cat="optim"):
                par.clip_grad_norm_(1.0)
                par.optimizer_step()
                par.zero_grad()
    timeline.finish()


def step_records(sp: bool, model_kw: dict) -> list[dict]:
    """comm's records of one whole step (the second) of own TP, in program order: forward, backward, then
    the step's own (SP's gradient sum, the norm)."""
    from shardlab import comm

    _, par = build(sp=sp, model_kw=model_kw)
    step(par, 0, model_kw)
    first = comm.RECORDER.order
    x, y = batch(par, 1, model_kw)
    par.forward_backward([(x, y)], 1.0 / y.numel())
    comm.set_phase("step")
    par.finish()
    par.clip_grad_norm_(1.0)
    par.optimizer_step()
    comm.set_phase("idle")
    return [dict(op=r.op, tag=r.tag, phase=r.phase, bytes=r.bytes) for r in comm.RECORDER.ring if r.order > first]


def doctor_stop_run(run_dir: str, corrupt_rank: int, extra: tuple = ()) -> dict:
    """The trainer at tp=2 x ddp=2 (own TP; `extra` overrides, e.g. pp=2 in place of dp),
    doctor.checksum_every=1 and on_anomaly=stop, `corrupt_rank` perturbed after step 0: the error this rank
    stopped with (None: it ran on), its data-parallel and TP groups, and the parameter the corruption hit."""
    from shardlab import comm, config
    from shardlab.doctor import checksum as checksum_mod
    from shardlab.doctor.core import AnomalyError
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4",
                             "train.micro_batch=2", "train.steps=3", "train.warmup_steps=1", "train.eval_every=0",
                             "ckpt.final=false", "doctor.hang_timeout_s=0", "parallel.tp=2", "parallel.dp=ddp",
                             "doctor.checksum_every=1", "doctor.on_anomaly=stop", f"debug.corrupt_rank={corrupt_rank}@0", *extra])
    cfg = config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    named = checksum_mod.replicated_parameters(trainer.strategy)
    if trainer.dims.size("dp_cp") == 1:  # no data-parallel replica: what TP keeps whole is perturbed
        named = trainer.strategy.tp_replicated_parameters()
    out = {"dp_group": trainer.dims.ranks("dp_cp"), "tp_group": trainer.dims.ranks("tp"),
           "corrupted": named[len(named) // 2][0], "error": None}  # the one inject.corrupt_parameter perturbs
    try:
        trainer.run()
    except AnomalyError as e:
        out["error"] = str(e)
    return out
