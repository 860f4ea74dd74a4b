"""Published figures the planner is set beside (no fitting: same presets, same assumptions), of two kinds:

  identity   the paper's figure is a formula the planner implements too (ZeRO's model-state bytes):
             agreement shows the formula is transcribed right, not that anything was predicted
  measured   the paper measured it on real hardware (Megatron-LM's MFU and TFLOP/s): a comparison
             of the planner's prediction with an external measurement

Each case names its source; configurations not stated in the source are marked as our reading.
"""
from __future__ import annotations

from .hardware import load_cluster
from .layout import Layout
from .train_spec import TrainSpec
from .memory import model_state_bytes
from .presets import PRESETS
from .step import evaluate

ZERO = "Rajbhandari et al. 2020, ZeRO, Fig. 1 (7.5B params, 64 GPUs, K=12)"
KORTHIKANTI = ("Korthikanti et al. 2022, abstract (530B GPT on 2240 A100); t=8, p=35 per replica as in MT-NLG's "
               "training (Microsoft/NVIDIA 2021: 280 GPUs per replica), so 8 replicas; global batch 2240 assumed")
NARAYANAN = ("Narayanan et al. 2021, Megatron-LM on GPU clusters, abstract: 502 PFLOP/s on 3072 A100 = 163 "
             "TFLOP/s per GPU, counted with recomputation (eq. 3); t=8, p=64, batch 3072 as read from Table 1")


def _megatron_flops(m, batch: int) -> float:
    """Narayanan et al. 2021, eq. (3): FLOPs per iteration counting recomputation,
    96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    s, L, h, V = m.seq, m.n_layer, m.d_model, m.vocab
    return 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def _zero_cases() -> list[dict]:
    out = []
    for strat, pub in (("ddp", 120.0), ("zero1", 31.4), ("zero2", 16.6), ("zero3", 1.9)):
        got = sum(model_state_bytes(7.5e9, 64, strat).values()) / 1e9
        out.append({"case": f"7.5B model states per GPU, {strat}", "published": pub, "planner": got,
                    "unit": "GB", "source": ZERO, "kind": "identity"})
    return out


def _mfu_530b(recompute: str, sp: bool) -> float:
    c = load_cluster("A100-80G", 2240)
    lay = Layout(dp=8, tp=8, pp=35, sp=sp, recompute=recompute)
    return evaluate(PRESETS["mt-530b"], TrainSpec(global_batch=2240, micro_batch=1), lay, c).mfu


def _tflops(name: str, gpus: int, tp: int, pp: int, batch: int) -> float:
    m = PRESETS[name]
    c = load_cluster("A100-80G", gpus)
    lay = Layout(dp=gpus // (tp * pp), tp=tp, pp=pp, recompute="full")
    p = evaluate(m, TrainSpec(global_batch=batch, micro_batch=1), lay, c)
    return _megatron_flops(m, batch) / (p.step_time * gpus) / 1e12


PUBLISHED = [
    ("530B MFU, sequence parallel + selective recompute", 54.2, "%", lambda: 100 * _mfu_530b("selective-attn", True),
     KORTHIKANTI),
    ("530B MFU, full recompute", 42.1, "%", lambda: 100 * _mfu_530b("full", False), KORTHIKANTI),
    ("1T on 3072 A100 (t=8, p=64, batch 3072), TFLOP/s per GPU", 163.0, "TFLOP/s",
     lambda: _tflops("mt-1t", 3072, 8, 64, 3072), NARAYANAN),
]


def evaluate_published() -> list[dict]:
    rows = _zero_cases()
    for case, pub, unit, fn, src in PUBLISHED:
        rows.append({"case": case, "published": pub, "planner": fn(), "unit": unit, "source": src,
                     "kind": "measured"})
    for r in rows:
        r["err"] = (r["planner"] - r["published"]) / r["published"]
    return rows


def published_table(rows: list[dict]) -> list[str]:
    """Markdown: the formula identities and the external measurements as two tables (REPORT.md and
    docs/planner.md, which is generated from this: `python -m shardlab.plan.doctables`)."""
    out = []
    for kind, title, note in (
            ("identity", "Formula identities",
             "The paper's figure is its own formula, (2 + 2 + K)Ψ/N_d and its variants, evaluated; the planner "
             "evaluates the same formula, so these rows check the transcription, not a prediction."),
            ("measured", "Against external measurements",
             "Measured by the authors on A100 clusters; the planner predicts them from its presets and its one "
             "GEMM-efficiency assumption (0.75), no per-case factor.")):
        out += [f"### {title}", "", note, "", "| case | published | planner | error | source |",
                "| --- | --- | --- | --- | --- |"]
        for p in rows:
            if p["kind"] == kind:
                out.append(f"| {p['case']} | {p['published']:.4g} {p['unit']} | {p['planner']:.4g} {p['unit']} | "
                           f"{p['err']:+.1%} | {p['source']} |")
        out.append("")
    return out
