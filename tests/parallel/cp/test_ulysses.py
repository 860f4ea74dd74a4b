"""Ulysses and the hybrid (parallel/cp/ulysses.py): all-to-all context parallelism equals one device in
float64 (compare.py's FP64_TOL, 1e-9) with causal masks and packed documents, for GPT-2 and Llama (grouped
K/V heads split and replicated), under ddp, zero3, tp=2 and recompute; the all-to-all bytes comm records equal
cost.py's formula exactly; a head count the degree does not divide is one line; checkpoints reshard
between the ring, Ulysses and cp=1."""
from __future__ import annotations

import functools

import pytest

from cp_harness import composed
from docmask_harness import assert_layout_parity
from shardlab.testing.compare import assert_float64_equal, in_float64

STEPS = 3
GPT = ["train.micro_batch=4"]
LLAMA = ["model.preset=llama-tiny", "train.micro_batch=4"]  # 4 query heads, 2 key/value heads, head_dim 16


@functools.lru_cache(maxsize=None)
def _single(arch: str):
    base = LLAMA if arch == "llama" else GPT
    return in_float64(composed, [*base, "parallel.strategy=single"], steps=STEPS)


def _assert_equal(out: dict, arch: str, parts=("losses", "norms", "eval", "params")) -> None:
    ref = _single(arch)
    for key in parts:
        assert_float64_equal(out[key], ref[key], key)


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_ulysses_cp2_equals_single(pool2, arch):
    base = LLAMA if arch == "llama" else GPT
    out = pool2.run(in_float64, composed, [*base, "parallel.cp=2", "parallel.cp_impl=ulysses"], STEPS,
                    timeout=300)[0]
    _assert_equal(out, arch)


def _a2a_per_layer(arch: str, cp: int, u: int, tp: int = 1, recompute: bool = False, batch: int = 4) -> dict:
    """cost.py's bytes of one layer and microbatch (float64), by tag (the hybrid's ring included)."""
    from shardlab.parallel.cp.cost import comm_bytes

    heads, kv = (4 // tp, max(2 // tp, 1)) if arch == "llama" else (4 // tp, 4 // tp)
    impl = "ulysses" if u == cp else "hybrid"
    return comm_bytes(impl, batch, 32, heads, kv, 16, cp, u, 8, 1, recompute)


def _assert_bytes(out: dict, expected: dict) -> None:
    for sent in out["sent"]:
        for i in ("0", "1"):
            assert {t: sent[f"{t}:blocks.{i}"] for t in expected} == expected, sent


@pytest.mark.parity
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_ulysses_cp2_recompute_and_bytes_equal_the_formula(pool2, recompute):
    out = pool2.run(in_float64, composed, [*GPT, "parallel.cp=2", "parallel.cp_impl=ulysses",
                                           f"train.recompute={recompute}"], STEPS, timeout=300)[0]
    _assert_equal(out, "gpt2")
    # per layer and pass: q, k, v, out of (b 4, heads 4, s/cp 16, d 16) x 8 B = 16 KiB each
    expected = _a2a_per_layer("gpt2", 2, 2, recompute=recompute == "full")
    assert expected["cp.a2a_bwd"] == 4 * 4 * 4 * 16 * 16 * 8
    _assert_bytes(out, expected)


@pytest.mark.parity
@pytest.mark.parametrize("arch,overrides", [
    ("gpt2", ["parallel.cp=2", "parallel.dp=ddp", "train.micro_batch=2"]),  # cp x dp
    ("gpt2", ["parallel.cp=2", "parallel.dp=zero3", "train.micro_batch=2"]),  # zero3 over dp_cp
    ("gpt2", ["parallel.cp=2", "parallel.tp=2"]),  # heads split twice: 4 / tp 2 / cp 2
    ("gpt2", ["parallel.cp=2", "parallel.tp=2", "parallel.sp=true"]),
    ("llama", ["parallel.cp=4"]),  # 2 K/V heads < 4 ranks: replicated 2 ways
    ("llama", ["parallel.cp=2", "parallel.tp=2"]),  # 1 K/V head per tp rank: replicated over cp
], ids=["cp2xddp2", "cp2xzero3", "cp2xtp2", "cp2xtp2sp", "llama-cp4-kvrep", "llama-cp2xtp2-kvrep"])
def test_ulysses_world4_equals_single(pool4, arch, overrides):
    base = LLAMA if arch == "llama" else GPT
    out = pool4.run(in_float64, composed, [*base, *overrides, "parallel.cp_impl=ulysses"], STEPS, timeout=400)[0]
    _assert_equal(out, arch)
    cp, tp = (4, 1) if "parallel.cp=4" in overrides else (2, 2 if "parallel.tp=2" in overrides else 1)
    batch = 2 if "train.micro_batch=2" in overrides else 4
    _assert_bytes(out, _a2a_per_layer(arch, cp, cp, tp, batch=batch))


@pytest.mark.parity
@pytest.mark.parametrize("impl,overrides", [
    ("ulysses", ["parallel.cp=2", "train.micro_batch=2"]),  # dp2 x cp2: FSDP2 over the flattened dp x cp mesh
    ("own", ["parallel.cp=2", "train.micro_batch=2"]),  # the ring
    ("hybrid", ["parallel.cp=4", "parallel.cp_ulysses=2"]),  # dp1 x cp4: FSDP2 over cp alone
], ids=["ulysses-dp2xcp2", "ring-dp2xcp2", "hybrid-cp4"])
def test_torch_fsdp2_over_dp_x_cp_equals_single(pool4, impl, overrides):
    """FSDP2 shards over dp x cp (torchtitan's mesh): the cp ranks' gradients are averaged with the dp ranks'."""
    out = pool4.run(in_float64, composed, [*GPT, *overrides, "parallel.dp=torch-fsdp2", f"parallel.cp_impl={impl}"],
                    STEPS, timeout=400)[0]
    _assert_equal(out, "gpt2")


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hybrid_cp4_ulysses2_equals_single_and_bytes(pool4, arch):
    base = LLAMA if arch == "llama" else GPT
    out = pool4.run(in_float64, composed, [*base, "parallel.cp=4", "parallel.cp_impl=hybrid",
                                           "parallel.cp_ulysses=2"], STEPS, timeout=400)[0]
    _assert_equal(out, arch)
    expected = _a2a_per_layer(arch, 4, 2)
    assert set(expected) == {"cp.a2a", "cp.a2a_bwd", "cp.kv", "cp.kv_bwd", "cp.dkv"}
    _assert_bytes(out, expected)


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_ulysses_packed_documents_cp2_equal_each_document_alone(pool2, arch):
    """The positions travel with the sequence shard; attention sees the whole sequence's document mask."""
    assert_layout_parity(pool2, arch, ["parallel.cp=2", "parallel.cp_impl=ulysses"])


@pytest.mark.parity
def test_hybrid_packed_documents_cp4_equal_each_document_alone(pool4):
    assert_layout_parity(pool4, "llama", ["parallel.cp=4", "parallel.cp_impl=hybrid", "parallel.cp_ulysses=2"])


@pytest.mark.parity
def test_ulysses_packed_documents_cp2_x_tp2_sp(pool4):
    assert_layout_parity(pool4, "gpt2", ["parallel.cp=2", "parallel.tp=2", "parallel.sp=true",
                                         "parallel.cp_impl=ulysses"])


# --- one line, exit 2, before anything starts -------------------------------------------------------------

@pytest.mark.parametrize("args,world,needle", [
    (["parallel.cp=3", "parallel.cp_impl=ulysses", "train.seq_len=48"], 3,
     "parallel.cp_impl=ulysses: parallel.cp=3 must divide the query heads of each rank, model.n_head=4 = 4"),
    (["parallel.cp=2", "parallel.tp=4", "parallel.cp_impl=ulysses"], 8,
     "parallel.cp=2 must divide the query heads of each rank, model.n_head=4 / parallel.tp=4 = 1"),
    (["model.preset=llama-tiny", "parallel.cp=4", "parallel.cp_impl=hybrid", "parallel.cp_ulysses=3"], 4,
     "parallel.cp_impl=hybrid needs parallel.cp_ulysses"),
    (["parallel.cp=4", "parallel.cp_impl=ulysses", "train.seq_len=30"], 4,
     "train.seq_len=30 is not divisible by 4 (Ulysses cuts every sequence into 4 contiguous pieces)"),
    (["parallel.cp=4", "parallel.cp_impl=hybrid", "parallel.cp_ulysses=2", "train.seq_len=34"], 4,
     "train.seq_len=34 is not divisible by 4 (the hybrid cuts every sequence into 4 zigzag chunks"),
])
def test_bad_ulysses_settings_are_one_line(args, world, needle):
    from shardlab import config

    preset = [] if any(a.startswith("model.preset=") for a in args) else ["model.preset=tiny"]
    cfg = config.load(None, [*preset, "train.seq_len=32", *args])
    with pytest.raises(config.ConfigError) as e:
        config.validate(cfg, world)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_ulysses_seq_len_needs_cp_not_2cp():
    """Ulysses' pieces are contiguous: seq_len % cp, where the ring's zigzag needs seq_len % 2cp."""
    from shardlab import config

    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=36", "parallel.cp=4", "parallel.cp_impl=ulysses"])
    config.validate(cfg, 4)
    with pytest.raises(config.ConfigError):
        config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=36", "parallel.cp=4"]), 4)


def test_kv_heads_replicate_below_the_degree_and_split_above():
    from shardlab.parallel.cp.checks import heads_refusal
    from shardlab.parallel.cp.cost import kv_heads

    assert kv_heads(8, 4) == 8 and kv_heads(2, 4) == 4 and kv_heads(1, 2) == 2
    assert heads_refusal(32, 8, 1, 16) is None  # llama3-8b at 16: 8 K/V heads replicated twice
    assert heads_refusal(12, 4, 1, 6) is not None  # 4 and 6: neither divides the other


# --- checkpoints --------------------------------------------------------------------------------------

COMMON = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
          "train.warmup_steps=1", "train.log_every=1", "doctor.hang_timeout_s=0", "train.eval_every=0"]


def _last_rows(root, runs: dict, pool=None) -> dict:
    """Each run of `runs` ({name: arguments}, in order: a resume reads an earlier run's checkpoint) through
    `shardlab train` (the cp runs' ranks on `pool`, the single-device ones in this process: run_harness.py);
    the last logged row of each."""
    import json

    from run_harness import train

    last = {}
    for name, args in runs.items():
        train([*args, *COMMON, "--out", str(root / name)], timeout=400, pool=pool)
        rows = [json.loads(line) for line in (root / name / "metrics.jsonl").read_text().splitlines()]
        last[name] = [r for r in rows if "loss" in r][-1]
    return last


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted single-device run both checkpoint tests compare with (3 steps): its last row."""
    return _last_rows(tmp_path_factory.mktemp("whole"), {"whole": ["parallel.strategy=single", "train.steps=3"]})["whole"]


def test_a_ulysses_checkpoint_resumes_under_the_ring_and_on_one_process(tmp_path, whole, pool2):
    """Parameters are replicated over cp whatever the implementation: a ulysses cp=2 checkpoint resumes at
    cp=1 and under the ring at cp=2, and the next step's loss equals an uninterrupted single-device run's."""
    ckpt = tmp_path / "uly" / "checkpoints" / "step_000002"
    last = _last_rows(tmp_path, {
        "uly": ["--nproc", "2", "parallel.cp=2", "parallel.cp_impl=ulysses", "train.steps=2", "ckpt.final=true"],
        "single": ["parallel.strategy=single", "train.steps=3", "--nproc", "1", "parallel.cp=1",
                   f"ckpt.resume={ckpt}"],
        "ring": ["--nproc", "2", "parallel.cp=2", "parallel.cp_impl=own", "train.steps=3", f"ckpt.resume={ckpt}"]},
        pool2)
    for name in ("uly", "single", "ring"):
        assert last[name]["step"] == (2 if name == "uly" else 3)
    assert whole["step"] == 3
    assert last["single"]["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert last["ring"]["loss"] == pytest.approx(whole["loss"], rel=1e-5)


def test_a_hybrid_checkpoint_resumes_on_one_process(tmp_path, whole, pool4):
    """The 2-D hybrid (cp=4, U=2: Ulysses inside a ring of 2) holds every parameter whole on each of its ranks:
    its checkpoint resumes at cp=1, and the next step's loss equals an uninterrupted single-device run's."""
    ckpt = tmp_path / "hybrid" / "checkpoints" / "step_000002"
    last = _last_rows(tmp_path, {
        "hybrid": ["--nproc", "4", "parallel.cp=4", "parallel.cp_impl=hybrid", "parallel.cp_ulysses=2",
                   "train.steps=2", "ckpt.final=true"],
        "single": ["parallel.strategy=single", "train.steps=3", "--nproc", "1", "parallel.cp=1",
                   f"ckpt.resume={ckpt}"]}, pool4)
    assert last["hybrid"]["step"] == 2 and last["single"]["step"] == 3
    assert last["single"]["loss"] == pytest.approx(whole["loss"], rel=1e-5)


# --- the planner ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl,cp,u", [("ulysses", 2, 2), ("hybrid", 4, 2)])
def test_planner_all_to_all_bytes_equal_the_recorded(pool4, impl, cp, u):
    """The planner's cp traffic (the spec's cost hook) equals what comm recorded in one fp32 step: the
    all-to-alls' payload and, under the hybrid, the ring's sends."""
    from shardlab.plan.comm import tp_pp_collectives
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import model_from_args

    model = model_from_args("tiny", seq=32)
    train = TrainSpec(global_batch=4, micro_batch=4, precision="fp32")
    lay = Layout(dp=1, cp=cp, cp_impl=impl, cp_ulysses=u)
    planned = [c for c in tp_pp_collectives(model, train, lay, 1) if c.group == "cp"]
    out = pool4.run(composed, [*GPT, f"parallel.cp={cp}", f"parallel.cp_impl={impl}", f"parallel.cp_ulysses={u}",
                               "parallel.dp=ddp", f"train.global_batch={4 * 4 // cp}"], 1, timeout=300)[0]
    for sent in out["sent"][:cp]:
        a2a = sum(b for t, b in sent.items() if t.startswith("cp.a2a"))
        ring = sum(b for t, b in sent.items() if t.split(":")[0] in ("cp.kv", "cp.kv_bwd", "cp.dkv"))
        assert a2a == planned[0].payload and planned[0].op == "all_to_all"
        assert ring == (planned[1].payload if len(planned) > 1 else 0)


def test_sync_points_count_the_waits_on_peers_not_the_calls():
    """The planner's sync waits (a rank blocking on its cp peers after computing) come from cost.py's count:
    Ulysses' q, k, v all-to-alls run back to back (one wait), so 4 per layer against 8 calls; the ring's
    backward waits once per step for its block and accumulator together, 2R-1 per layer against 3R-2 sends."""
    from shardlab.parallel.cp.cost import sync_points
    from shardlab.plan.comm import tp_pp_collectives
    from shardlab.plan.layout import Layout
    from shardlab.plan.train_spec import TrainSpec
    from shardlab.plan.presets import model_from_args

    assert sync_points("ulysses", 4, 4, 2) == {"a2a": 8} and sync_points("ulysses", 2, 2, 1, True) == {"a2a": 6}
    assert sync_points("own", 4, 1, 2) == {"ring": 14} and sync_points("own", 2, 1, 1, True) == {"ring": 4}
    assert sync_points("hybrid", 4, 2, 1) == {"a2a": 4, "ring": 3}
    model, train = model_from_args("tiny", seq=64), TrainSpec(global_batch=1, micro_batch=1, precision="fp32")
    for impl, u, syncs, calls in (("own", 0, [14], [20]), ("ulysses", 0, [8], [16]), ("hybrid", 2, [8, 6], [16, 8])):
        got = [c for c in tp_pp_collectives(model, train, Layout(dp=1, cp=4, cp_impl=impl, cp_ulysses=u), 1)
               if c.group == "cp"]
        assert [c.syncs for c in got] == syncs and [c.calls for c in got] == calls


def test_planner_refuses_non_dividing_heads_with_trainings_line():
    from shardlab import config
    from shardlab.plan.layout import Layout
    from shardlab.plan.presets import model_from_args

    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=48", "parallel.cp=3", "parallel.cp_impl=ulysses"])
    with pytest.raises(config.ConfigError) as trained:
        config.validate(cfg, 3)
    with pytest.raises(ValueError) as planned:
        Layout(cp=3, cp_impl="ulysses").check(model_from_args("tiny", seq=48))
    assert str(planned.value) == str(trained.value)
