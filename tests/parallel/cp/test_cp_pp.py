"""Context parallelism inside pipeline stages: pp=2 x cp=2 (world 4, gloo), the ring and Ulysses, equal one
device in float64 (compare.py's FP64_TOL, 1e-9) over 3 AdamW steps of 2 accumulated microbatches (losses,
clipped norms, eval loss, every stage's parameters). Each stage's attention uses its cp group; the step cuts
each microbatch into this rank's chunks before the schedule, so the stages hand on sequence-sharded
activations (b, s/cp, d) and every stage's forward takes the microbatch's cut document positions."""
from __future__ import annotations

import functools

import pytest

from cp_harness import composed
from docmask_harness import assert_layout_parity
from shardlab.testing.compare import assert_float64_equal, in_float64

STEPS = 3
BASE = {"gpt2": ["train.micro_batch=2"], "llama": ["model.preset=llama-tiny", "train.micro_batch=2"]}
IMPL = {"ring": ["parallel.cp_impl=own"], "ulysses": ["parallel.cp_impl=ulysses"]}


@functools.lru_cache(maxsize=None)
def _single(arch: str):
    return in_float64(composed, [*BASE[arch], "parallel.strategy=single"], steps=STEPS, accum=2)


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("impl", ["ring", "ulysses"])
def test_pp2_x_cp2_equals_single(pool4, arch, impl):
    out = pool4.run(in_float64, composed, [*BASE[arch], "parallel.pp=2", "parallel.cp=2", *IMPL[impl]], STEPS, 2,
                    timeout=400)[0]
    ref = _single(arch)
    for key in ("losses", "norms", "eval", "params"):
        assert_float64_equal(out[key], ref[key], key)
    assert set(out["params"]) == set(ref["params"])


@pytest.mark.parity
@pytest.mark.parametrize("impl", ["ring", "ulysses"])
def test_pp2_x_cp2_packed_documents_equal_each_document_alone(pool4, impl):
    """The document positions reach every stage cut with the tokens (the ring masks by chunk, Ulysses
    gathers them per stage)."""
    assert_layout_parity(pool4, "llama", ["parallel.pp=2", "parallel.cp=2", *IMPL[impl]])


@pytest.mark.parity
@pytest.mark.parametrize("impl,extra", [
    ("ulysses", ["parallel.pp_schedule=torch-1f1b", "train.recompute=full"]),  # torch's schedule runs the backwards
    ("ring", ["parallel.pp_schedule=interleaved", "parallel.pp_virtual=2", "model.n_layer=4"]),  # 2 chunks per rank
], ids=["ulysses-torch-1f1b-recompute", "ring-interleaved"])
def test_pp2_x_cp2_other_schedules_equal_single(pool4, impl, extra):
    """The cp ranks' gradients are reduced by the data-parallel layer over dp x cp even at dp = 1: the
    schedules hand the gradients over to it as they do under data parallelism."""
    layers = [e for e in extra if e.startswith("model.")]
    ref = in_float64(composed, [*BASE["gpt2"], *layers, "parallel.strategy=single"], steps=2, accum=2)
    out = pool4.run(in_float64, composed, [*BASE["gpt2"], "parallel.pp=2", "parallel.cp=2", *IMPL[impl], *extra],
                    2, 2, timeout=400)[0]
    for key in ("losses", "norms", "params"):
        assert_float64_equal(out[key], ref[key], key)


@pytest.mark.parity
def test_tp2_x_pp2_x_cp2_ulysses_at_world_8(pool8):
    """World 8 = pp 2 x cp 2 x tp 2 under Ulysses: heads split twice (4 / tp 2 / cp 2), each stage's all-to-all in
    its cp group, the stages handing on (b, s/cp, d) activations between the same (cp, tp) ranks. 8 gloo processes:
    the session's pool8, shared with the pipeline's world-8 test."""
    ref = _single("gpt2")
    out = pool8.run(in_float64, composed, [*BASE["gpt2"], "parallel.pp=2", "parallel.cp=2", "parallel.tp=2",
                                           *IMPL["ulysses"]], STEPS, 2, timeout=500)[0]
    for key in ("losses", "norms", "eval", "params"):
        assert_float64_equal(out[key], ref[key], key)
