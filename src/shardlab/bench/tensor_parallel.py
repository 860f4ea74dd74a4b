"""`shardlab bench tp`: data parallelism vs tensor parallelism at world 2 and the same global batch.
`measure(quick)` runs the study and returns rows and figures; `run` writes the report (tp x dp at world 4
is not in it yet).

Method. One pool of 2 gloo ranks; the same model, initialisation and batches for all. `dp2` is the own
`ddp` strategy with micro-batch B per rank; the TP rows give both ranks the whole global batch 2B.
- Memory: each configuration in turn builds its model and optimizer and trains a few steps inside a
  `PeakMemory` window; twice, in opposite orders, the smaller of the two, max over ranks. Beside it the
  exact state per rank (parameters, gradients, AdamW moments).
- Time: every round trains one step of each configuration, the order rotating, a barrier before each
  timed step; then own vs DTensor back to back (A B, then B A next round): the median ratio.
- Bytes: own TP's recorded payload per step by op against `tp.comm_bytes_per_step`.
"""
from __future__ import annotations

import copy
import time

import torch

MICRO_BATCH, SEQ = 8, 128
SIZES = {"quick": dict(rounds=9, warm=2, mem_steps=2, model=dict(n_layer=2, n_head=4, d_model=128)),
         "full": dict(rounds=24, warm=4, mem_steps=3, model=dict(n_layer=4, n_head=4, d_model=256))}
# label -> (kind, impl, sp)
CONFIGS = {"dp2": ("dp", None, False), "tp2 own": ("tp", "own", False), "tp2 dtensor": ("tp", "dtensor", False),
           "tp2 own sp": ("tp", "own", True), "tp2 dtensor sp": ("tp", "dtensor", True)}
PAIRS = [("tp2 own", "tp2 dtensor", "tp_own_vs_dtensor"), ("tp2 own sp", "tp2 dtensor sp", "tp_sp_own_vs_dtensor")]


class _Run:
    """One configuration, built by the composition the trainer uses (`shardlab.parallel.build`): a step =
    forward, loss, backward, gradient sync, clip, AdamW."""

    def __init__(self, label: str, model_kw: dict):
        from shardlab.config import Config
        from shardlab.model.gpt import GPTConfig, build_model
        from shardlab.parallel import build

        kind, impl, sp = CONFIGS[label]
        cfg = Config()
        cfg.train.seq_len, cfg.train.grad_clip, cfg.ckpt.final = SEQ, 1.0, False
        if kind == "dp":
            cfg.parallel.strategy = "ddp"
        else:
            cfg.parallel.strategy, cfg.parallel.tp, cfg.parallel.tp_impl, cfg.parallel.sp = "single", 2, impl, sp
        model = build_model(GPTConfig(vocab_size=256, max_seq_len=SEQ, **model_kw), seed=1337)
        self.kind, self.par = kind, build(cfg, torch.device("cpu"), model)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        par = self.par
        par.forward_backward([(x, y)], 1.0 / y.numel())
        par.finish()
        par.clip_grad_norm_(1.0)
        par.optimizer_step()
        par.zero_grad()

    def state_bytes(self) -> int:
        local = [p.to_local() if hasattr(p, "to_local") else p for p in self.par.module.parameters()]
        return 4 * sum(p.numel() * p.element_size() for p in local)  # params, grads, two AdamW moments


def _measure(size: dict) -> dict:
    """On every rank: memory windows, rotating timed rounds, own vs DTensor pairs, own TP's bytes."""
    from shardlab import comm
    from shardlab.data.corpus import load_tokens
    from shardlab.data.dataset import TokenDataset, get_batch
    from shardlab.observe.memory import PeakMemory, release

    rank, world = comm.rank(), comm.world_size()
    data = TokenDataset(load_tokens("stdlib"), SEQ)
    gen = torch.Generator().manual_seed(0)

    def batch(label):
        """The global batch of world x B sequences: dp2 takes its rank's B, TP ranks take all of them."""
        idx = torch.randint(0, len(data), (world * MICRO_BATCH,), generator=gen)
        if CONFIGS[label][0] == "dp":
            idx = idx[rank * MICRO_BATCH:(rank + 1) * MICRO_BATCH]
        return get_batch(data, idx.tolist())

    labels = list(CONFIGS)
    for label in ("dp2", "tp2 own"):  # warm-up: one-time allocations must not land in a window
        _Run(label, size["model"]).step(*batch(label))
    peaks = {label: [] for label in labels}
    state, measured, kind = {}, {}, ""
    for order in (labels, labels[::-1]):
        for label in order:
            comm.barrier()
            with PeakMemory("cpu") as peak:
                run = _Run(label, size["model"])
                for _ in range(size["mem_steps"]):
                    comm.RECORDER.reset_step()
                    run.step(*batch(label))
                state[label] = run.state_bytes()
                measured[label] = dict(comm.RECORDER.step_stats()["bytes"])
            peaks[label].append(peak.bytes)
            kind = peak.kind
            del run
            release()
    live = {label: _Run(label, size["model"]) for label in labels}
    times = {label: [] for label in labels}
    for r in range(size["rounds"]):
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            x, y = batch(label)
            comm.barrier()
            t0 = time.perf_counter()
            live[label].step(x, y)
            times[label].append(time.perf_counter() - t0)
    paired = {key: [] for _, _, key in PAIRS}
    for r in range(size["rounds"]):
        for a, b, key in PAIRS:
            x, y = batch(a)
            t = {}
            for label in ((a, b) if r % 2 == 0 else (b, a)):
                comm.barrier()
                t0 = time.perf_counter()
                live[label].step(x, y)
                t[label] = time.perf_counter() - t0
            paired[key].append(t[a] / t[b])
    peak_all = comm.all_gather_object({k: min(v) for k, v in peaks.items()})  # allocator noise only adds
    return {"times": times, "paired": paired, "peaks": {k: max(p[k] for p in peak_all) for k in labels},
            "kind": kind, "state": state, "measured": copy.deepcopy(measured), "rank": rank}


def measure(quick: bool = True) -> dict:
    """Run the study on 2 ranks; returns {"rows": [...], "figures": {...}} in the bench's results.json shape:
    `tp_own_vs_dtensor_step_ratio` (own / DTensor, median of back-to-back pairs), `tp_mem_ratio` (peak
    memory tp=2 / dp=2), `tp_comm_exact` (1.0 when own TP's recorded bytes equal the analytic ones)."""
    from shardlab.bench import common
    from shardlab.parallel.tp import comm_bytes_per_step

    size = SIZES["quick" if quick else "full"]
    res = common.run_on_ranks(_measure, size, world=2)
    m, world, warm = size["model"], 2, size["warm"]
    rows, exact = [], []
    for label, (kind, impl, sp) in CONFIGS.items():
        t = common.stats(res["times"][label][warm:])
        row = {"config": label, "tp_impl": impl, "sp": sp, "step_s": t,
               "tokens_per_s": world * MICRO_BATCH * SEQ / t["median"], "peak_mem_bytes": res["peaks"][label],
               "peak_mem_kind": res["kind"], "state_bytes": res["state"][label],
               "bytes_per_step": res["measured"][label]}
        if kind == "tp" and impl == "own":
            row["analytic_bytes_per_step"] = comm_bytes_per_step(m["n_layer"], m["d_model"], SEQ,
                                                                 world * MICRO_BATCH * SEQ, sp, grad_norm=True)
            exact.append(row["bytes_per_step"] == row["analytic_bytes_per_step"])
        rows.append(row)
    by = {r["config"]: r for r in rows}
    figures = {"tp_mem_ratio": by["tp2 own"]["peak_mem_bytes"] / by["dp2"]["peak_mem_bytes"],
               "tp_state_ratio": by["tp2 own"]["state_bytes"] / by["dp2"]["state_bytes"],
               "tp_comm_exact": 1.0 if all(exact) else 0.0}
    for _, _, key in PAIRS:
        s = common.stats(res["paired"][key][warm:])
        figures[f"{key}_step_ratio"] = s["median"]
        figures[f"{key}_step_ratio_min"], figures[f"{key}_step_ratio_max"] = s["min"], s["max"]
    return {"suite": "tp", "figures": figures, "rows": rows, "size": size}


def run(out, quick: bool) -> dict:
    from shardlab.bench import common

    doc = measure(quick)
    common.write_results(out, "tp", doc["figures"], doc["rows"])
    table = common.md_table(
        ["config", "step ms (median)", "tokens/s", "peak memory MiB", "state MiB", "bytes/step (own: = analytic?)"],
        [[r["config"], f"{r['step_s']['median'] * 1e3:.1f}", f"{r['tokens_per_s']:,.0f}",
          f"{r['peak_mem_bytes'] / 2**20:.1f}", f"{r['state_bytes'] / 2**20:.2f}",
          f"{sum(r['bytes_per_step'].values()) if isinstance(r['bytes_per_step'], dict) else r['bytes_per_step']}"
          + ("" if "analytic_bytes_per_step" not in r else
             f" ({'yes' if r['bytes_per_step'] == r['analytic_bytes_per_step'] else 'NO'})")] for r in doc["rows"]])
    f = doc["figures"]
    common.write_report(out, "Tensor parallelism vs data parallelism (world 2, same global batch)", [
        "dp2: own ddp, micro batch B per rank; tp2: both ranks run the whole global batch 2B with the layers split. "
        "Step times from rotating rounds; own vs DTensor from back-to-back pairs (median ratio).",
        table,
        f"**Figures**: tp_own_vs_dtensor_step_ratio = {f['tp_own_vs_dtensor_step_ratio']:.3f} (must ≤ 1.05), "
        f"tp_mem_ratio = {f['tp_mem_ratio']:.3f} (peak memory tp=2 ÷ dp=2), tp_state_ratio = "
        f"{f['tp_state_ratio']:.3f}, tp_comm_exact = {f['tp_comm_exact']:.0f}."])
    return doc


if __name__ == "__main__":  # python -m shardlab.bench.tensor_parallel [--full]
    import json
    import sys

    print(json.dumps(measure(quick="--full" not in sys.argv), indent=1, default=str))
