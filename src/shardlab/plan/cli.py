"""`shardlab plan [search|calibrate] key=value ... [--json] [--explain]`.

Exit codes: 0 a plan that fits (search: at least one layout fits), 1 it does not fit (what would
fit is printed first; --json: "fits": false and "suggestions"), 2 bad input.

  shardlab plan model=gpt2 cluster=H100-SXM gpus=8 strategy=zero2 global_batch=64 micro_batch=8
  shardlab plan search model=gpt3-6.7b cluster=H100-SXM gpus=64 global_batch=512 --top 5
  shardlab plan calibrate model=small [--out PATH]          (then: shardlab plan cluster=this ...)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from shardlab.parallel.pp import registry

from .from_config import trainer_defaults
from .hardware import load_cluster
from .layout import STRATEGY_ALIASES, Layout, strategy_fields
from .train_spec import TrainSpec
from .presets import model_from_args, resolve_preset

MODEL_KEYS = {"n_layer": int, "d_model": int, "n_head": int, "vocab": int, "seq": int,
              "mlp_ratio": int, "tied": "bool", "arch": str, "n_kv_heads": int, "ffn": int, "head_dim": int,
              # latent attention and multi-token prediction (llama; DeepSeek-V3's: docs/moe.md)
              "mla_kv_rank": int, "mla_q_rank": int, "mla_rope_dim": int, "mla_v_dim": int, "mtp_layers": int,
              "qk_norm": "bool",  # q and k RMSNorms (Qwen3): their passes, saved inputs and kernels (ops, activations, host)
              "expert_bias": "bool",  # experts with biases (GPT-OSS): Megatron-Core's passes (plan/moe.py)
              "glu_clamp": float,  # the experts' GLU inputs clamped (GPT-OSS's 7): Megatron-Core's eager passes
              "window": int, "window_skip": int}  # sliding-window attention: its width, every n-th block full
# the model's MoE blocks (ModelSpec): experts, top-k, every n-th block, the experts' own width, a shared expert's
# width, leading dense blocks; ep is the layout's
MODEL_MOE_KEYS = ("moe_experts", "moe_top_k", "moe_every", "moe_ffn", "moe_shared_ffn", "moe_first_dense", "moe_groups",
                  "moe_group_topk")
TRAIN_KEYS = {"global_batch": int, "global_batch_tokens": int, "micro_batch": int, "precision": str,
              "optimizer": str, "fp32_grad_accum": "bool", "flash_attention": "bool",
              "compile": "bool",  # compile: torch.compile each block (train.compile; plan/fusion.py)
              "llama_impl": str,  # whose llama block: own, torchtitan, te (TE's: its saved tensors, FP8 weight cache)
              "cuda_graphs": str,  # none, full, or Megatron-Core's scopes attn,moe_router,moe_preprocess (plan/host.py)
              "fp8": str,  # train.fp8: the block linears' float8 recipe (none, tensorwise, rowwise, mxfp8; plan/fp8.py)
              "fp8_attention": "bool",  # the fused attention in FP8 too (TE's fp8_dot_product_attention; attention.py)
              "moe_load": float,  # the busiest expert-parallel rank's token-slots over the mean (1.0: balanced)
              "z_loss": "bool"}  # the z-loss computed eagerly on the fp32 logits (ops.Z_LOSS_BYTES)
LAYOUT_KEYS = {"dp": int, "strategy": str, "dp_shard": int, "tp": int, "sp": "bool", "pp": int, "cp": int,
               "cp_impl": str, "cp_ulysses": int, "tp_impl": str,
               "schedule": str, "v": int, "pp_split": str, "pp_layout": str, "recompute": str, "recompute_modules": str, "offload": str, "zero1_impl": str,
               "reshard_after_forward": "bool", "root_reshards": "bool", "padding": str,
               "bucket_mb": float, "first_bucket_mb": float, "last_bucket_mb": float, "comm_dtype": str,
               "health_check": "bool", "tp_comm_overlap": "bool", "overlap_p2p_comm": "bool",
               "offload_activations": int, "ep": int, "ep_overlap": "bool", "ep_sms": int, "ep_dedup": "bool",
               "ep_dispatcher": str}
MOE_KEYS = {"moe_experts": int, "moe_top_k": int, "moe_every": int, "moe_capacity": float,
            "moe_ffn": int, "moe_shared_ffn": int, "moe_first_dense": int, "moe_groups": int, "moe_group_topk": int,
            "moe_aux_weight": float, "moe_z_weight": float, "moe_bias_update": float,
            "moe_router_lr_scale": float}  # plan/moe.py (weights and balancing change nothing); ep: the layout's
OTHER_KEYS = {"model": str, "cluster": str, "gpus": int, "dp_replicate": int,  # dp_replicate: dp_shard = dp / it
              "power_w": float, "attention": str}  # the GPU's power limit; the fused attention kernel
ALL_KEYS = {**MODEL_KEYS, **TRAIN_KEYS, **LAYOUT_KEYS, **MOE_KEYS, **OTHER_KEYS}
IMPL_FIELDS = ("zero_partition", "zero3_impl")  # Layout fields a strategy name sets (layout.STRATEGY_IMPL), no keys
IMPL_KEYS = ("tp_impl", *IMPL_FIELDS)  # how the layers run: `plan search` plans its candidates with the user's
# `plan search`'s default budget: a dense model's space takes seconds; a large MoE model's (every ep) takes hours
SEARCH_BUDGET_S = 120.0


# Ranges a plan can be asked about: beyond them the enumeration (divisors, per-layer parameter lists)
# runs for minutes, and no real model or cluster is near them (GPT-3 175B: 96 layers, h = 12,288)
RANGES = {"n_layer": (1, 1024), "d_model": (1, 262_144), "n_head": (1, 4096), "vocab": (1, 2**24),
          "seq": (1, 2**22), "mlp_ratio": (1, 64), "n_kv_heads": (1, 4096), "ffn": (1, 2**20), "head_dim": (1, 2**16), "global_batch": (1, 2**24),
          "global_batch_tokens": (1, 2**40), "micro_batch": (1, 2**16), "gpus": (1, 2**20),
          "dp": (1, 2**20), "dp_shard": (1, 2**20), "tp": (1, 4096), "pp": (1, 1024), "v": (1, 64),
          "cp": (1, 4096), "offload_activations": (0, 1024), "moe_experts": (0, 2**16), "moe_top_k": (1, 2**16), "moe_every": (1, 1024),
          "moe_ffn": (0, 2**20), "moe_shared_ffn": (0, 2**20), "moe_first_dense": (0, 1024), "moe_groups": (0, 2**16), "moe_group_topk": (0, 2**16), "ep": (1, 2**16),
          "mla_kv_rank": (0, 2**16), "mla_q_rank": (0, 2**16), "mla_rope_dim": (0, 2**12), "mla_v_dim": (0, 2**12),
          "mtp_layers": (0, 16)}
FLOAT_RANGES = {"power_w": (1.0, 2000.0), "bucket_mb": (0.001, 2**20), "first_bucket_mb": (0.001, 2**20), "moe_capacity": (0, 2**10),
                "last_bucket_mb": (0.0, 2**20)}


def _int(v: str) -> int:
    """An integer, also written as 1e6 or 1_000_000 (an integral value only)."""
    try:
        return int(v)
    except ValueError:
        f = float(v)  # ValueError on garbage, as int() would
        if not (f == f and abs(f) < 2**63 and f.is_integer()):
            raise ValueError from None
        return int(f)


# Training's key names (`shardlab train`'s, docs/training.md) -> the planner's, with the value as training
# spells it turned into the planner's: one vocabulary, so a run's overrides plan as they train.
TRAINING_KEYS = {"model.preset": ("model", None), "model.vocab_size": ("vocab", None), "train.seq_len": ("seq", None),
                 "model.max_seq_len": ("seq", None), "model.ffn_hidden": ("ffn", None),
                 "parallel.pp_virtual": ("v", None), "train.dtype": ("precision", "dtype"),
                 "parallel.pp_schedule": ("schedule", "schedule"),
                 # FSDP2's MixedPrecisionPolicy.reduce_dtype: the dtype the gradient collectives run in
                 "reduce_dtype": ("comm_dtype", None)}


def _planner_key(k: str, v: str) -> tuple[str, str]:
    """(the planner's key, value) for a key in training's spelling or the planner's own."""
    if k in TRAINING_KEYS:
        name, kind = TRAINING_KEYS[k]
        if kind == "dtype":  # train.dtype=bf16 trains with autocast over fp32 weights: the planner's bf16-autocast
            from shardlab import precision
            v = precision.PLANNED_AS.get(v, v)
        elif kind == "schedule":  # torch-1f1b, zb, ... -> the schedule the planner models (parallel/pp/registry.py)
            from shardlab.parallel.pp import registry
            v = registry.SPECS[v].planned_as if v in registry.SPECS else v
        return name, v
    k = k.removeprefix("model.").removeprefix("train.").removeprefix("parallel.") if k != "model" else k
    return ("model" if k == "preset" else k), v


def _unknown(k: str) -> str:
    import difflib

    names = sorted(set(ALL_KEYS) | set(TRAINING_KEYS))
    bare = k.rpartition(".")[2]  # parallel.tpp: the planner's tp, before any long training name
    hint = ((difflib.get_close_matches(bare, sorted(ALL_KEYS), n=1) if "." in k else [])
            or difflib.get_close_matches(k, names, n=1) or difflib.get_close_matches(bare, names, n=1))
    return (f"unknown key {k!r}" + (f" (did you mean {hint[0]}?)" if hint else "")
            + "; `shardlab plan --help` lists the keys (training's names such as train.seq_len work too)")


def _parse_kv(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"expected key=value, got {item!r}")
        given, v = item.split("=", 1)
        k, v = _planner_key(given, v)
        if k not in ALL_KEYS:
            raise ValueError(_unknown(given))
        typ = ALL_KEYS[k]
        try:
            if typ == "bool":
                if v.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                out[k] = v.lower() in ("true", "1", "yes")
            else:
                out[k] = _int(v) if typ is int else typ(v)
        except ValueError:
            raise ValueError(f"bad value for {k}: {v!r}") from None
        lo, hi = RANGES.get(k) or FLOAT_RANGES.get(k) or (None, None)
        if lo is not None and not lo <= out[k] <= hi:
            raise ValueError(f"{k} must be between {lo:,} and {hi:,}, got {v}")
    if out.get("strategy") in STRATEGY_ALIASES:  # training names: single, torch-fsdp2, fsdp, ...
        if out["strategy"] == "single":
            if out.get("dp", 1) != 1:
                raise ValueError(f"strategy single runs on one rank: dp must be 1, got {out['dp']}")
            out["dp"] = 1
        # the planner's strategy, and a torch layer's own way (torch-zero1: whole parameters; torch-fsdp2:
        # FSDP2's kernels, plan/fsdp2_kernels.py)
        out.update(strategy_fields(out["strategy"]))
    return out


def build(kv: dict, for_search: bool = False):
    """(model, train, layout, cluster) from parsed key=value pairs, with defaults."""
    model = model_from_args(kv.get("model", "small" if "n_layer" not in kv else None),
                            **{k: kv[k] for k in (*MODEL_KEYS, *MODEL_MOE_KEYS) if k in kv})
    cluster = load_cluster(kv.get("cluster", "H100-SXM"), kv.get("gpus"))
    if "power_w" in kv or "attention" in kv:
        from . import attention
        if kv.get("attention", cluster.attention) not in ("",) + attention.BACKENDS:
            raise ValueError(f"attention must be one of {', '.join(attention.BACKENDS)}, got {kv['attention']!r}")
        cluster = replace(cluster, power_w=kv.get("power_w", cluster.power_w),
                          attention=kv.get("attention", cluster.attention))
    lay_kw = {k: kv[k] for k in (*LAYOUT_KEYS, *IMPL_FIELDS) if k in kv}
    tp, pp = lay_kw.get("tp", 1), lay_kw.get("pp", 1) * lay_kw.get("cp", 1)  # cp: ranks like pp's, for dp
    if "dp" not in lay_kw and not for_search:
        lay_kw["dp"] = max(1, (kv.get("gpus") or tp * pp) // (tp * pp))
    if "dp_replicate" in kv:  # the trainer's key for HSDP; the layout keeps the shard group's size
        r, dp = kv["dp_replicate"], lay_kw.get("dp", 1)
        if r <= 0 or dp % r or lay_kw.get("dp_shard", dp // r) != dp // r:
            raise ValueError(f"dp_replicate {r} must divide dp {dp} (and agree with dp_shard)")
        lay_kw["dp_shard"] = dp // r
    if "schedule" in lay_kw and "v" not in lay_kw and lay_kw["schedule"] in registry.SPECS:
        lay_kw["v"] = registry.SPECS[lay_kw["schedule"]].virtual[0]  # a V schedule holds two stages per rank
    defaults = trainer_defaults()  # what `shardlab train` does (attention, precision, ...), unless told otherwise
    layout = Layout(**{**{k: v for k, v in defaults.items() if k in LAYOUT_KEYS}, **lay_kw})
    seq = kv.get("seq", model.seq)
    b = kv.get("micro_batch", 1)
    if "global_batch_tokens" in kv:
        if kv["global_batch_tokens"] % seq:
            raise ValueError(f"global_batch_tokens {kv['global_batch_tokens']} is not a multiple of seq {seq}")
        gbs = kv["global_batch_tokens"] // seq
    else:
        gbs = kv.get("global_batch", (512 if for_search else b * layout.dp))
    tr_kw = {k: kv[k] for k in TRAIN_KEYS if k in kv and k not in ("global_batch", "global_batch_tokens")}
    train = TrainSpec(global_batch=gbs, seq=seq, recompute_early_stop=defaults["recompute_early_stop"],
                      **{**{k: v for k, v in defaults.items() if k in TRAIN_KEYS}, **tr_kw})
    if kv.get("gpus") is None and not for_search:
        cluster = replace(cluster, num_gpus=max(cluster.num_gpus, layout.world))
    return model, train, layout, cluster


def _plan(args) -> int:
    """Exit 0 when the layout fits, 1 when it does not (what would fit is printed first)."""
    from .report import fixes_dict, render, render_fixes, shortfall, to_dict
    from .search import fixes
    from .step import evaluate
    kv = _parse_kv(args.kv)
    model, train, layout, cluster = build(kv)
    plan = evaluate(model, train, layout, cluster)
    moe_terms = _moe(kv, model, train, layout, plan.m)
    counts: dict = {}
    near, found = fixes(plan, counts=counts) if not plan.fits else ([], [])
    if args.json:
        d = to_dict(plan)
        if not plan.fits:
            from .search import sp_hint
            d = {"fits": False, "verdict": shortfall(plan), "suggestions": fixes_dict(near, found),
                 "search": counts, "sp_hint": sp_hint(plan), **d}
        if moe_terms:
            d["moe"] = moe_terms
        print(json.dumps(d, indent=2))
    else:
        print((render_fixes(plan, near, found, counts) if not plan.fits else "") + render(plan, args.explain))
        if moe_terms:
            from .moe import render as render_moe
            print(render_moe(moe_terms))
    return 0 if plan.fits else 1


def _moe(kv: dict, model, train, layout, microbatches: int) -> dict | None:
    """The MoE / EP terms (plan/moe.py) when moe_experts is set; bad MoE input raises ValueError (exit 2)."""
    from . import moe
    if not model.moe_experts:
        if kv.get("ep", 1) > 1:
            raise ValueError(f"ep={kv['ep']} needs moe_experts (expert parallelism splits the experts)")
        return None
    # the trainer's own MoE layout (data parallel, ddp; its routing's terms in fp32, docs/moe.md); every layout's
    # step time, memory and all-to-alls are in the plan itself (the model's MoE blocks, Layout.ep)
    if layout.tp > 1 or layout.pp > 1 or layout.cp > 1 or layout.strategy != "ddp" \
            or model.moe_ffn or model.moe_shared_ffn or model.moe_first_dense:  # not the trainer's MoE blocks
        return None
    spec = moe.MoESpec(model.moe_experts, model.moe_top_k, model.moe_every, kv.get("moe_capacity", 1.25), kv.get("ep", 1))
    per_param = train.param_bytes + train.grad_bytes + train.optimizer_bytes
    dense = replace(model, moe_experts=0)  # plan/moe.py counts the experts on top of the dense model
    return moe.plan(dense, spec, layout.dp, train.micro_batch, train.seq or model.seq, microbatches, per_param)


def _search(args) -> int:
    from .report import mfu_flag, to_dict
    from .search import search, why
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, got {args.top}")
    kv = _parse_kv(args.kv)
    if kv.get("ep", 1) > 1:
        raise ValueError("plan search chooses ep itself (every ep that divides moe_experts and a stage's ranks); "
                         "drop ep=, or plan that layout with shardlab plan")
    model, train, _, cluster = build(kv, for_search=True)
    t0 = time.perf_counter()
    counts: dict = {}
    if args.budget < 0:
        raise ValueError(f"--budget must be 0 (no limit) or a number of seconds, got {args.budget:g}")
    fitting = search(model, train, cluster, kv.get("gpus"), impl={k: kv[k] for k in IMPL_KEYS if k in kv},
                     fitting_only=True, counts=counts, budget_s=args.budget)  # only the fitting layouts are timed
    dt = time.perf_counter() - t0
    top = fitting[:args.top]
    reason = why(top[0], top[1]) if len(top) > 1 else (
        "only one layout fits" if top else "no layout fits in memory")
    if args.json:
        print(json.dumps({"tried": counts["tried"], "candidates": counts["candidates"],
                          "truncated": counts["truncated"], "fitting": len(fitting), "seconds": dt, "reason": reason,
                          "top": [to_dict(p) for p in top]}, indent=2))
        return 0 if top else 1
    print(f"plan search: {model.name} ({model.params / 1e9:.2f}B params) on {cluster.num_gpus} x "
          f"{cluster.name}, global batch {train.global_batch} x {train.seq} tokens, {train.precision}")
    print(f"{counts['tried']} layouts evaluated in {dt:.2f} s, {len(fitting)} fit in memory (only those timed)")
    if counts["truncated"]:
        print(f"the budget ({args.budget:g} s) ran out after {counts['tried']:,} of {counts['candidates']:,} layouts, "
              f"visited in a spread order: the ranking covers those (--budget 0 tries them all)")
    print()
    print(f"{'#':>3}  {'layout':<48}{'mb':>4}{'tokens/s':>14}{'MFU':>8}{'step':>12}{'mem/GPU':>12}  bound")
    flags = [mfu_flag(p) for p in top]
    for i, (p, flag) in enumerate(zip(top, flags), 1):
        mark = "*" if flag and flag["above"] else " "
        print(f"{i:>3}  {p.layout.describe():<48}{p.train.micro_batch:>4}{p.tokens_per_s:>14,.0f}"
              f"{p.mfu:>7.1%}{mark}{p.step_time * 1e3:>10.1f}ms{p.mem_total / 2**30:>9.1f}GiB  {p.bound()}")
    print(f"\nwhy #1: {reason}")
    above = next((f for f in flags if f and f["above"]), None)
    if above:
        print(f"* MFU above every cited measurement on {above['generation']} (highest {above['ceiling']:.1%}: "
              f"{above['anchor']}; {above['source']}): optimistic (docs/planner.md, 'The MFU ceiling')")
    return 0 if top else 1


def _calibrate(args) -> int:
    from .calibrate import calibrate
    kv = _parse_kv(args.kv)
    names = [resolve_preset(n)[0] for n in kv.get("model", "tiny,small").split(",")]
    path = calibrate(models=[model_from_args(n) for n in names], micro_batches=args.micro_batch,
                     out=Path(args.out) if args.out else None, quick=args.quick, trainer=not args.no_trainer)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sub = argv.pop(0) if argv and argv[0] in ("search", "calibrate") else "plan"
    ap = argparse.ArgumentParser(prog=f"shardlab plan{'' if sub == 'plan' else ' ' + sub}",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kv", nargs="*", help="key=value (model, cluster, gpus, dp, tp, pp, strategy, ...)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    if sub == "plan":
        ap.add_argument("--explain", action="store_true", help="show the formula behind each line")
    if sub == "search":
        ap.add_argument("--top", type=int, default=5, help="how many fitting layouts to show (at least 1)")
        ap.add_argument("--budget", type=float, default=SEARCH_BUDGET_S,
                        help=f"seconds to search before ranking what was found (default {SEARCH_BUDGET_S:g}; 0: all)")
    if sub == "calibrate":
        ap.add_argument("--out", help="profile path (default ~/.cache/shardlab/this.toml)")
        ap.add_argument("--micro-batch", type=int, nargs="+", default=[1, 2, 4, 8])
        ap.add_argument("--quick", action="store_true", help="fewer repetitions")
        ap.add_argument("--no-trainer", action="store_true",
                        help="skip timing shardlab train on a miniature model (its per-step overhead)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        for item in args.kv:  # an old or loose preset name still works; say what it was read as
            if item.split("=", 1)[0] in ("model", "preset", "model.preset") and "," not in item:
                note = resolve_preset(item.split("=", 1)[1])[1]
                if note:
                    print(f"shardlab plan: note: {note}", file=sys.stderr)
        return {"plan": _plan, "search": _search, "calibrate": _calibrate}[sub](args)
    except (ValueError, OSError) as e:
        print(f"shardlab plan: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
