"""Streaming DiLoCo fragments and the HSDP layout of local SGD / DiLoCo (parallel/sync/periodic.py, docs/sync.md).

Fragments at world 2 (tiny model with 4 blocks): the largest burst is one fragment, the bytes per H steps
are the model's, F = 1 and F = 2 equal a by-hand DiLoCo bitwise. HSDP at world 4 (2 replicas x 2 shards,
own zero inside): H = 1 equals every-step HSDP, bytes as analytic, resume mid-period with fragments is exact
(per-shard, per-fragment outer state). The doctor: each fragment compared right after its outer step, a
perturbed θ_start named at its fragment's next one (world 2, and on shards under HSDP at world 4)."""
from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

from shardlab import comm, config
from shardlab.errors import ConfigError
from shardlab.parallel.sync.periodic import cut_fragments

from sync_harness import sgd_instead_of_adamw

TINY = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2",
        "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "doctor.hang_timeout_s=0",
        "ckpt.final=false", "train.grad_clip=0"]
FOUR_BLOCKS = TINY + ["model.n_layer=4"]


def _build(overrides, sgd=False):
    from shardlab import parallel

    cfg = config.load(None, overrides)
    cfg = config.validate(cfg, comm.world_size())
    # an update linear in the gradient: averaging updated replicas = updating with the average
    with sgd_instead_of_adamw(lr=0.05) if sgd else nullcontext():
        return parallel.build(cfg)


def _steps(par, n, after_step=None):
    """`n` steps on this rank's own random tokens; per step the recorder's stats (and `after_step(s)`)."""
    vocab = par.model.cfg.vocab_size
    gen = torch.Generator().manual_seed(comm.rank())
    stats = []
    for s in range(1, n + 1):
        comm.RECORDER.reset_step()
        x = torch.randint(0, vocab, (2, 32), generator=gen)
        par.step([(x, torch.roll(x, -1, 1))], 1.0 / 128)
        if after_step is not None:
            after_step(s)
        stats.append(comm.RECORDER.step_stats())
    return stats


def _params(par):
    return {k: v.detach().clone() for k, v in par.full_parameters().items()}


# --- the cut ------------------------------------------------------------------------------------------

def test_fragments_are_contiguous_units_nearest_one_fth():
    # embedding 18,432, four blocks of 49,984, head 128 (tiny, n_layer=4): cuts at the unit boundaries
    # nearest 1/F of the 218,496 total
    sizes = [18432] + [49984] * 4 + [128]
    assert cut_fragments(sizes, 1) == [0, 6]
    assert cut_fragments(sizes, 2) == [0, 3, 6]  # 118,400 | 100,096
    assert cut_fragments(sizes, 4) == [0, 2, 3, 4, 6]  # 68,416 | 49,984 | 49,984 | 50,112
    assert cut_fragments([1, 100, 1], 3) == [0, 1, 2, 3]  # never an empty fragment
    with pytest.raises(ConfigError, match="at most"):
        cut_fragments(sizes, 7)


# --- bytes: the largest burst is one fragment -----------------------------------------------------------

H = 4


def _burst_fn():
    out = {}
    for f in (1, 2, 4):
        par = _build(FOUR_BLOCKS + ["parallel.strategy=ddp", "parallel.sync=diloco", f"parallel.sync_every={H}",
                                    f"parallel.fragments={f}"])
        stats = _steps(par, H)
        out[f] = {"per_step": [s["bytes_by_tag"].get("diloco pseudo-gradient", 0) for s in stats],
                  "all_reduce": [s["bytes"].get("all_reduce", 0) for s in stats],
                  "fragments": [4 * (b - a) for a, b in par.dp.bounds],
                  "units": par.dp.fragment_units, "model": 4 * sum(p.numel() for p in par.dp.params)}
    local = _steps(_build(FOUR_BLOCKS + ["parallel.strategy=ddp", "parallel.sync=local_sgd",
                                         f"parallel.sync_every={H}", "parallel.fragments=2"]), H)
    out["local_sgd"] = [s["bytes_by_tag"].get("local_sgd average", 0) for s in local]
    sync = _steps(_build(FOUR_BLOCKS + ["parallel.strategy=ddp"]), 2)
    out["sync"] = [s["bytes"]["all_reduce"] for s in sync]
    return out


@pytest.fixture(scope="module")
def bursts(pool2):
    return pool2.run(_burst_fn, timeout=240)[0]


def test_largest_burst_is_one_fragment(bursts):
    model = bursts[1]["model"]
    assert bursts["sync"] == [model, model]  # every step sends the whole gradient
    assert max(bursts[1]["per_step"]) == model  # plain DiLoCo: the whole model in one burst
    block = 4 * 49984  # the largest unit: a fragment boundary can only fall between units
    for f in (2, 4):
        b = bursts[f]
        assert max(b["per_step"]) == max(b["fragments"])  # one fragment per burst, never two at once
        assert abs(max(b["per_step"]) - model / f) <= block  # within one unit of 1/F of the model
        assert b["units"][0][0] == "embed" and b["units"][-1][-1] == "head"
    # exactly, for this model: F=2 -> embedding+2 blocks (473,600 B) vs 1/2 = 436,992 B; F=4 -> embedding+1
    # block (273,664 B) vs 1/4 = 218,496 B
    assert max(bursts[2]["per_step"]) == 473600 and max(bursts[4]["per_step"]) == 273664


def test_local_sgd_streams_the_same_fragments(bursts):
    assert bursts["local_sgd"] == bursts[2]["per_step"]  # the parameters instead of Δ, same sizes and steps


def test_fragments_keep_the_bytes_per_h_steps(bursts):
    model = bursts[1]["model"]
    for f in (1, 2, 4):
        per_step = bursts[f]["per_step"]
        assert sum(per_step) == model  # over H steps: the model once
        assert per_step == bursts[f]["all_reduce"]  # and nothing else is all-reduced
        assert sum(1 for x in per_step if x) == f  # F bursts per period, at staggered steps


# --- F = 1 and F = 2 equal DiLoCo by hand, bitwise ------------------------------------------------------

def _by_hand_fn(f):
    """Ours at H = 2 (AdamW inside, outer Nesterov 0.7 / 0.9) vs replicas that never synchronise
    themselves plus the outer steps written here: one SGD per fragment, fragment k after the steps s
    with (s - k*H/F) % H == 0."""
    h = 2
    common = TINY + ["parallel.strategy=ddp", "parallel.sync=diloco"]
    ours = _build(common + [f"parallel.sync_every={h}", f"parallel.fragments={f}"])
    _steps(ours, 5)
    ref = _build(common + ["parallel.sync_every=1000000"])
    params = ref.dp.params
    bounds = ours.dp.bounds
    flat = torch.cat([p.detach().reshape(-1) for p in params]).float()
    starts = [flat[a:b].clone() for a, b in bounds]
    outers = [torch.optim.SGD([s], lr=0.7, momentum=0.9, nesterov=True, foreach=False) for s in starts]

    @torch.no_grad()
    def outer(s):
        cur = torch.cat([p.detach().reshape(-1) for p in params])
        for k, (a, b) in enumerate(bounds):
            if s >= max(k * h // f, 1) and (s - k * h // f) % h == 0:
                delta = starts[k] - cur[a:b]
                dist.all_reduce(delta)
                starts[k].grad = delta / comm.world_size()
                outers[k].step()
                cur[a:b] = starts[k]
        off = 0
        for p in params:
            p.copy_(cur[off:off + p.numel()].view_as(p))
            off += p.numel()

    _steps(ref, 5, outer)
    return _params(ours), _params(ref)


@pytest.mark.parametrize("f", [1, 2])
def test_fragments_equal_diloco_by_hand_bitwise(pool2, f):
    for ours, ref in pool2.run(_by_hand_fn, f, timeout=180):
        for k in ours:
            assert torch.equal(ours[k], ref[k]), k


# --- HSDP: 2 replicas x 2 shards at world 4 ---------------------------------------------------------------

def _train(run_dir, overrides):
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, TINY + overrides)
    cfg = config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    trainer.run()
    return _params(trainer.par)


HSDP = ["parallel.dp_replicate=2", "parallel.dp_shard=2"]


def _hsdp_fn(strategy):
    """H = 1 with plain SGD inside vs every-step HSDP; and the bytes of local SGD at H = 2."""
    base = TINY + [f"parallel.strategy={strategy}", "train.global_batch=8"] + HSDP
    ref = _build(base, sgd=True)
    init = _params(ref)
    ref_stats = _steps(ref, 3)
    runs = {}
    modes = {"local_sgd": [], "diloco": ["parallel.outer_lr=1", "parallel.outer_momentum=0"]}
    if strategy != "zero2":  # DiLoCo's outer step is the same code on every layer: checked on one (cost)
        del modes["diloco"]
    for mode, extra in modes.items():
        par = _build(base + [f"parallel.sync={mode}", "parallel.sync_every=1"] + extra, sgd=True)
        _steps(par, 3)
        runs[mode] = _params(par)
    h2 = _build(base + ["parallel.sync=local_sgd", "parallel.sync_every=2"])
    h2_stats = _steps(h2, 2)
    shard_bytes = 4 * sum(i.numel for i in h2.dp.dp.infos)  # this rank's padded shards (the zero layer inside the sync), fp32
    return _params(ref), runs, ref_stats, h2_stats, shard_bytes, init


@pytest.fixture(scope="module")
def hsdp(pool4):
    # zero1 left out for the suite's time: it differs from zero2 only in when it reduces (one microbatch here)
    return {s: pool4.run(_hsdp_fn, s, timeout=300) for s in ("zero2", "zero3")}


@pytest.mark.parity
@pytest.mark.parametrize("strategy", ["zero2", "zero3"])
def test_hsdp_h1_equals_every_step_hsdp(hsdp, strategy):
    for ref, runs, *_, init in hsdp[strategy]:
        assert not torch.equal(ref["wte.weight"], init["wte.weight"])  # it did train
        for mode in runs:
            for k in ref:
                # rtol 1e-5 (the bar): average-then-step vs step-then-average, fp32 rounding
                torch.testing.assert_close(runs[mode][k], ref[k], rtol=1e-5, atol=1e-7, msg=f"{mode} {k}")


@pytest.mark.parametrize("strategy", ["zero2", "zero3"])
def test_hsdp_bytes_split_as_analytic(hsdp, strategy):
    for _, _, ref_stats, h2_stats, shard_bytes, _ in hsdp[strategy]:
        def tag_sum(stats, pred):
            return sum(b for t, b in stats["bytes_by_tag"].items() if pred(t))
        # inside a replica: the same reduce-scatter every step as every-step HSDP
        for s in h2_stats:
            assert s["bytes"]["reduce_scatter"] == ref_stats[0]["bytes"]["reduce_scatter"]
        # every-step HSDP all-reduces the gradient shards across replicas each step ...
        assert tag_sum(ref_stats[0], lambda t: t.startswith("ar:")) == shard_bytes
        # ... local SGD sends the parameter shards once per H = 2 steps, nothing across replicas between
        assert [tag_sum(s, lambda t: t.startswith("ar:")) for s in h2_stats] == [0, 0]
        assert [s["bytes_by_tag"].get("local_sgd average", 0) for s in h2_stats] == [0, shard_bytes]
        if strategy != "zero3":  # zero1/2 keep full parameters: the synchronised shards gathered once more
            ag = [s["bytes"]["all_gather"] for s in h2_stats]
            assert ag[1] == 2 * ag[0]


# --- config -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, needle", [
    (["parallel.sync=diloco", "parallel.sync_every=4", "parallel.fragments=5"], "F <= H"),
    (["parallel.fragments=2"], "parallel.fragments=2"),
    (["parallel.sync=diloco", "parallel.fragments=0"], "parallel.fragments=0"),
    (["model.preset=tiny", "parallel.sync=diloco", "parallel.sync_every=8", "parallel.fragments=5"], "at most 4"),
    (["parallel.sync=local_sgd", "parallel.strategy=zero2", "parallel.dp_replicate=2",
      "parallel.offload=optimizer"], "no offload"),
    (["parallel.sync=local_sgd", "parallel.strategy=torch-fsdp2", "parallel.dp_replicate=2"], "HSDP replicas"),
])
def test_bad_fragment_and_hsdp_settings_are_one_line_errors(overrides, needle):
    cfg = config.load(None, overrides)
    with pytest.raises(ConfigError, match=needle) as e:
        cfg = config.validate(cfg, 4)
    assert "\n" not in str(e.value)


def _hsdp_resume_fn(run_dir):
    # zero2, 2 replicas x 2 shards, DiLoCo H = 2 with 2 fragments (fragment 0 synced after steps 2 and 4,
    # fragment 1 after 1 and 3): saved at step 3, when both fragments have taken outer steps (different
    # numbers) and fragment 0 is mid-period; each rank's shard of θ_start, momentum, parameters and AdamW
    # state under its shard's keys. Step 4 ends with fragment 1 mid-period: the replicas differ.
    hsdp = ["parallel.strategy=zero2", "train.global_batch=8", "parallel.sync=diloco", "parallel.sync_every=2",
            "parallel.fragments=2", "train.steps=4"] + HSDP
    straight = _train(run_dir / "straight", hsdp + ["ckpt.every=3"])
    ckpt = run_dir / "straight" / "checkpoints" / "step_000003"
    resumed = _train(run_dir / "resumed", hsdp + [f"ckpt.resume={ckpt}"])
    return straight, resumed


def test_hsdp_fragments_resume_exactly_mid_period(pool4, tmp_path):
    out = pool4.run(_hsdp_resume_fn, tmp_path, timeout=300)
    assert any(not torch.equal(out[0][0][k], out[2][0][k]) for k in out[0][0])  # replicas 0 and 1 differ
    for straight, resumed in out:
        for k in straight:
            assert torch.equal(resumed[k], straight[k]), k


# --- the doctor: each fragment compared across replicas right after its outer step ---------------------------
# World 2, own ddp, H = 2, F = 2: fragment 1 is synchronised after trainer steps 0 and 2, fragment 0 after 1
# and 3. Between outer steps the replicas differ by design; right after a fragment's outer step its
# parameters must be bitwise equal on every replica, so that is when they are compared.

DOCTOR = FOUR_BLOCKS + ["train.steps=4", "parallel.strategy=ddp", "parallel.sync_every=2"]
NEXT_SYNC_AFTER_STEP_0 = {0: 1, 1: 2}  # fragment -> the first trainer step > 0 that ends with its outer step


def _doctor_run(run_dir, overrides):
    """Train; returns every checksum result, the error raised if any, the parameter corrupt_rank perturbs
    and its fragment, and how many parameters the fragments hold."""
    from shardlab.doctor.core import AnomalyError
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, DOCTOR + overrides)
    cfg = config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    doctor, s = trainer.doctor, trainer.strategy
    checks = []
    real = doctor.checksum

    def logged(step, fragments=None):
        checks.append(real(step, fragments))
        return checks[-1]

    doctor.checksum = logged
    names = [n for f in range(s.n_fragments) for n, _ in s.fragment_parameters(f)]
    corrupted = names[len(names) // 2]  # the one inject.corrupt_parameter perturbs
    fragment = next(f for f in range(s.n_fragments) if corrupted in dict(s.fragment_parameters(f)))
    error = None
    try:
        trainer.run()
    except AnomalyError as e:
        error = str(e)
    return checks, error, corrupted, fragment, len(names)


def _doctor_runs(run_dir):
    diloco = ["parallel.sync=diloco", "parallel.fragments=2", "doctor.checksum_every=1"]
    return {"clean": _doctor_run(run_dir / "clean", diloco),
            "corrupt": _doctor_run(run_dir / "corrupt", diloco + ["debug.corrupt_rank=1@0", "doctor.on_anomaly=stop"]),
            "f1": _doctor_run(run_dir / "f1", ["parallel.sync=local_sgd", "doctor.checksum_every=3"])}


@pytest.fixture(scope="module")
def doctor_runs(pool2, tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor_sync")
    return root, pool2.run(_doctor_runs, root, timeout=240)


def test_fragments_are_compared_right_after_their_outer_step_without_false_alarm(doctor_runs):
    _, out = doctor_runs
    checks, error, _, _, n_params = out[0]["clean"]
    assert error is None
    # every fragment sync is checked (checksum_every=1), then the end: fragment 0 synchronised after step 3
    assert [(c["step"], c["fragments"]) for c in checks] == [(0, [1]), (1, [0]), (2, [1]), (3, [0]), (4, [0])]
    assert all(c["consistent"] and c["compared"] > 0 for c in checks)
    assert checks[0]["compared"] + checks[1]["compared"] == n_params  # fragment 1, then 0: the whole model


def test_corrupted_replica_is_named_at_its_fragments_next_outer_step(doctor_runs):
    root, out = doctor_runs
    checks, error, corrupted, fragment, _ = out[0]["corrupt"]
    step = NEXT_SYNC_AFTER_STEP_0[fragment]
    assert out[1]["corrupt"][1] == error  # the same verdict on both ranks: the run stopped everywhere
    assert error is not None and "REPLICAS DIVERGED" in error and corrupted in error and f"fragment {fragment}" in error
    assert all(c["consistent"] for c in checks[:-1]) and checks[-1]["step"] == step
    div = json.loads((root / "corrupt" / "doctor" / f"divergence_step_{step}.json").read_text())
    assert div["first"]["ranks"] == [1] and div["first"]["param"] == corrupted
    assert div["first"]["fragment"] == fragment and div["fragments"] == [fragment]
    assert div["first"]["detail"]["1"]["n_diff"] == 1  # the one element injected into θ_start


def test_f1_requested_mid_period_is_checked_at_the_next_outer_step(doctor_runs):
    _, out = doctor_runs
    checks, error, _, _, _ = out[0]["f1"]
    # requested after step 2 (checksum_every=3), mid-period: compared after the outer step of step 3; the
    # run's end (after that outer step) compares the whole model again
    assert error is None
    assert [(c["step"], c["fragments"]) for c in checks] == [(3, [0]), (4, [0])]
    assert all(c["consistent"] for c in checks)

# --- the doctor under HSDP: a fragment's shards compared across the replicate group -----------------------

def _hsdp_doctor_fn(run_dir):
    """zero3, 2 replicas x 2 shards, DiLoCo H = 2, F = 2 (fragment 1 synchronised after steps 0 and 2,
    fragment 0 after 1): rank 3 (replica 1, shard 1) perturbs its θ_start after step 0."""
    from shardlab.doctor.core import AnomalyError
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, FOUR_BLOCKS + ["parallel.strategy=zero3", "train.global_batch=8", "train.steps=3",
                                           "parallel.sync=diloco", "parallel.sync_every=2", "parallel.fragments=2",
                                           "doctor.checksum_every=1", "debug.corrupt_rank=3@0"] + HSDP)
    cfg = config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    s = trainer.strategy
    names = [n for f in range(s.n_fragments) for n, _ in s.fragment_parameters(f)]
    corrupted = names[len(names) // 2]  # the one inject.corrupt_parameter perturbs
    fragment = next(f for f in range(s.n_fragments) if corrupted in dict(s.fragment_parameters(f)))
    try:
        trainer.run()
    except AnomalyError as e:
        return str(e), corrupted, fragment
    return None, corrupted, fragment


def test_hsdp_doctor_names_the_diverged_shard_and_stops_every_rank(pool4, tmp_path):
    out = pool4.run(_hsdp_doctor_fn, tmp_path, timeout=300)
    error, corrupted, fragment = out[0]
    step = {0: 1, 1: 2}[fragment]  # its fragment's next outer step after step 0
    # the same verdict on all four ranks, though only the shard-1 replicate group [1, 3] saw the divergence
    assert error is not None and all(o[0] == error for o in out)
    div = json.loads((tmp_path / "doctor" / f"divergence_step_{step}.json").read_text())  # written by rank 0
    assert div["first"]["ranks"] == [3] and div["first"]["reference_rank"] == 1
    assert div["first"]["param"] == corrupted and div["first"]["fragment"] == fragment
    assert div["first"]["detail"]["3"]["n_diff"] == 1  # measured against rank 1's shard, not its own
