"""Doctor unit tests: detection, localisation, checksums, watchdog + flight-recorder analysis, uneven
inputs, collective verification. Multi-rank parts run in a world-2 gloo pool (no test can hang)."""
import json
import math
import time
from pathlib import Path

import pytest
import torch

from shardlab import comm
from shardlab.config import Config, ConfigError
from shardlab.doctor import anomaly, checksum, hang, inject
from shardlab.doctor.localize import build_replica, localize
from shardlab.model.gpt import build_model, resolve_model_config
from shardlab.model.loss import cross_entropy


def tiny_cfg(**over) -> Config:
    cfg = Config()
    cfg.model.preset, cfg.model.n_layer, cfg.train.seq_len, cfg.train.micro_batch = "tiny", 3, 16, 2
    cfg.parallel.strategy = "ddp"
    for k, v in over.items():
        section, name = k.split("__")
        setattr(getattr(cfg, section), name, v)
    return cfg


# --- single process ---------------------------------------------------------------------------------

def test_fault_parsing_is_strict():
    cfg = tiny_cfg(debug__inject_nan="7:1:blocks.2.mlp", debug__hang_rank="1@5")
    f = inject.Faults.parse(cfg.debug, world=2)
    assert f.nan == (7, 1, "blocks.2.mlp") and f.hang == (1, 5)
    assert f.fires("hang", 5, 1) and not f.fires("hang", 5, 1)  # once only
    for bad in ({"debug__inject_nan": "7:1"}, {"debug__hang_rank": "2@5"}, {"debug__corrupt_rank": "x"}):
        with pytest.raises(ConfigError):
            inject.Faults.parse(tiny_cfg(**bad).debug, world=2)
    model = build_model(resolve_model_config(tiny_cfg().model, 16), 0)
    with pytest.raises(ConfigError, match="did you mean"):
        inject.Faults.parse(tiny_cfg(debug__inject_nan="1:0:blocks.2.mpl").debug, 2).check_module(model)


def test_localize_names_the_first_nonfinite_module():
    cfg = tiny_cfg()
    model = build_model(resolve_model_config(cfg.model, 16), 0)
    replica = build_replica(cfg, dict(model.named_parameters()), torch.device("cpu"))
    x, y = torch.randint(0, 256, (2, 16)), torch.randint(0, 256, (2, 16))
    clean = localize(replica, [(x, y)], [[3, 4]])
    assert not clean["found"] and all(math.isfinite(v) for v in clean["per_sample_loss"])
    h = inject.attach_nan(replica, "blocks.2.mlp")
    bad = localize(replica, [(x, y), (x, y)], [[3, 4], [5, 6]])
    h.remove()
    # the NaN is created by blocks.2.mlp itself (its children fc/proj are finite; its parents come later)
    assert bad["found"] and bad["module"] == "blocks.2.mlp" and bad["where"] == "forward"
    assert bad["micro"] == 0 and bad["sample_indices"] == [3, 4]


def test_decide_attributes_nonfinite_to_the_local_rank_and_spikes_to_the_median():
    def row(loss=2.0, lf=1.0, gf=1.0):
        return {"loss": loss, "tokens": 10, "grad_sq": 1.0, "loss_finite": lf, "grad_finite": gf}
    spike = anomaly.SpikeDetector(3.0, warmup=3)
    assert anomaly.decide([row(), row()], 1.0, False, spike) is None
    found = anomaly.decide([row(), row(lf=0.0)], float("nan"), False, spike)
    assert found["kind"] == "non-finite" and found["ranks"] == [1]
    assert anomaly.decide([row(gf=0.0), row()], float("nan"), True, spike) is None  # fp16 overflow: expected
    for v in (2.0, 2.1, 1.9):
        spike.add(v)
    found = anomaly.decide([row(2.0), row(20.0)], 1.0, False, spike)
    assert found["kind"] == "spike" and found["ranks"] == [1]


def test_local_grad_monitor_counts_a_split_backward_weight_gradient_once():
    """Zero-bubble's split backward: the input-gradient pass (I) reaches every weight with no gradient, the
    weight-gradient pass (W) brings it. The monitor must see each weight's gradient exactly once, with the
    norm an unsplit backward gives."""
    from shardlab.parallel.pp.zero_bubble import WeightGradStore, split_backward

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8, requires_grad=True)
    names = list(dict(net.named_parameters()))
    plain = anomaly.LocalGradMonitor(list(net.named_parameters()), torch.device("cpu"))
    net(x).square().sum().backward()
    want, fired = plain.per_param(), plain.fired
    plain.remove()
    net.zero_grad()

    split = anomaly.LocalGradMonitor(list(net.named_parameters()), torch.device("cpu"))
    store = WeightGradStore()
    for lin in split_backward(net):
        lin.store = store
    net(x).square().sum().backward()  # I: input gradients only, the weight GEMMs queued
    assert split.fired == 0 and all(p.grad is None for p in net.parameters())
    store.run()  # W
    got = split.per_param()
    assert split.fired == fired == len(names)
    assert all(math.isclose(got[n], want[n], rel_tol=1e-6) for n in names), (got, want)


def test_checksum_compare_majority_and_tie():
    names = ["a", "b", "c"]
    t0, t1 = [(1, 1), (2, 2), (3, 3)], [(1, 1), (2, 9), (3, 9)]
    res = checksum.compare(names, [t0, t1])
    assert not res["consistent"] and res["first"] == {"param": "b", "ranks": [1], "reference_rank": 0}
    res = checksum.compare(names, [t1, t0, t0])  # three replicas: the majority wins, rank 0 is the odd one
    assert res["first"]["ranks"] == [0] and res["ranks"]["0"]["n_params"] == 2
    a = torch.randn(100)
    b = a.clone()
    b[[3, 7]] = b[[7, 3]]  # a swap keeps the plain sum: the weighted one catches it
    assert checksum.tensor_checksum(a) != checksum.tensor_checksum(b)


def _dump(rank, world, phase, records, now=100.0):
    return {"rank": rank, "world": world, "phase": phase, "step": 5, "now_perf": now, "last_progress_age_s": 3.0,
            "main_stack": ["trainer.py:1 run"], "records": records}


def _rec(seq, op="all_reduce", nbytes=4_200_000, state="completed", tag="bucket 3"):
    return {"seq": seq, "op": op, "bytes": nbytes, "dtype": "float32", "shape": [nbytes // 4], "group": "world",
            "tag": tag, "step": 5, "phase": "backward", "t_launch": 90.0, "state": state, "stack": ["ddp.py:1 x"]}


def test_hang_analysis_on_synthetic_dumps():
    dumps = {0: _dump(0, 2, "backward", [_rec(56), _rec(57, state="started")]),
             1: _dump(1, 2, "data loading", [_rec(56)])}
    res = hang.analyse(dumps)
    assert res["kind"] == "hang" and res["absent"] == [1]
    assert res["lines"][0].startswith("rank 1 never joined all_reduce #57 of world (bucket 3, 4.2 MB); its last "
                                      "completed op was all_reduce #56") and "it was in: data loading" in res["lines"][0]
    # NCCL-like: rank 0's collectives count as completed once enqueued; rank 1 is still behind
    nccl = {0: _dump(0, 2, "optimizer", [_rec(56), _rec(57), _rec(58)]), 1: _dump(1, 2, "data loading", [_rec(56)])}
    res = hang.analyse(nccl)
    assert res["kind"] == "hang" and res["absent"] == [1] and res["lines"][0].startswith("rank 1 never joined "
                                                                                         "all_reduce #57")
    dumps[1]["records"].append(_rec(57, op="broadcast", state="started"))
    res = hang.analyse(dumps)
    assert res["kind"] == "mismatch" and res["seq"] == 57 and "MISMATCH" in res["lines"][0]
    res = hang.analyse({0: dumps[0]})
    assert any("no flight record from rank 1" in line for line in res["lines"])


def _grec(seq, group, ranks, order, state="completed", op="all_reduce", peer=None, nbytes=4000):
    return {**_rec(seq, op=op, nbytes=nbytes, state=state, tag="x"), "group": group, "group_ranks": ranks,
            "order": order, "peer": peer}


def test_hang_analysis_numbers_per_group_and_names_the_subgroup():
    # world 4; tp groups [0, 1] and [2, 3]. Rank 3 never reaches tp [2, 3]'s 5th all-reduce: the global
    # order differs per rank (rank 0 did more on its own tp group), the per-group numbers line up.
    d = {0: _dump(0, 4, "backward", [_grec(1, "world", [0, 1, 2, 3], 1), _grec(4, "tp", [0, 1], 9)]),
         1: _dump(1, 4, "backward", [_grec(1, "world", [0, 1, 2, 3], 1), _grec(4, "tp", [0, 1], 9)]),
         2: _dump(2, 4, "backward", [_grec(4, "tp", [2, 3], 5), _grec(5, "tp", [2, 3], 6, state="started")]),
         3: _dump(3, 4, "data loading", [_grec(1, "world", [0, 1, 2, 3], 1), _grec(4, "tp", [2, 3], 5)])}
    res = hang.analyse(d)
    assert res["kind"] == "hang" and (res["group"], res["group_ranks"], res["seq"]) == ("tp", [2, 3], 5)
    assert res["absent"] == [3] and res["lines"][0].startswith("rank 3 never joined all_reduce #5 of tp [2, 3]")
    # a mismatch inside one subgroup names that group
    d[3]["records"].append(_grec(5, "tp", [2, 3], 6, state="started", op="all_gather"))
    res = hang.analyse(d)
    assert res["kind"] == "mismatch" and res["group_ranks"] == [2, 3]
    assert res["lines"][0].startswith("COLLECTIVE MISMATCH at sequence #5 of tp [2, 3]")


def test_hang_analysis_of_point_to_point_names_the_missing_side():
    # pp [1, 3]: rank 1 waits in its 2nd send to rank 3; rank 3 received only the first
    d = {1: _dump(1, 4, "forward", [_grec(1, "pp", [1, 3], 1, op="send", peer=3),
                                    _grec(2, "pp", [1, 3], 2, op="send", peer=3, state="started")]),
         3: _dump(3, 4, "optimizer", [_grec(1, "pp", [1, 3], 1, op="recv", peer=1)])}
    res = hang.analyse(d)
    assert res["kind"] == "hang" and res["absent"] == [3] and res["waiting"] == [1]
    assert res["lines"][0].startswith("rank 3 never posted the recv matching send #2 rank 1 -> 3 of pp [1, 3]")
    # sizes of the two sides differ: a mismatch of that channel
    d[3]["records"].append(_grec(2, "pp", [1, 3], 2, op="recv", peer=1, state="started", nbytes=8))
    res = hang.analyse(d)
    assert res["kind"] == "mismatch" and res["seq"] == 2 and "rank 3: recv 8 B" in res["lines"][2]


# --- world 2 ----------------------------------------------------------------------------------------

def _strategy(cfg, device=torch.device("cpu")):
    """The data-parallel layer of the trainer's composition (the tests bring their own optimizer)."""
    from shardlab import parallel
    return parallel.build(cfg, device).dp


def _step(doctor, s, step, opt=None, launch_early=False):
    """One minimal training step driven like the trainer does (`launch_early`: the check's all-gather
    starts after backward, before the gradient wait, as in the trainer; else check_step issues it)."""
    g = torch.Generator().manual_seed(100 * step + comm.rank())
    x, y = torch.randint(0, 256, (2, 16), generator=g), torch.randint(0, 256, (2, 16), generator=g)
    comm.RECORDER.step = step
    action = doctor.before_step(step, [2 * comm.rank(), 2 * comm.rank() + 1])
    s.set_requires_gradient_sync(True)
    loss = cross_entropy(s.module(x), y, reduction="sum")
    (loss * doctor.loss_weight_factor(action) / 64).backward()
    doctor.after_backward(step, (x, y), loss)
    if launch_early:
        doctor.launch_check(step, shadow=action == "shadow")
    s.finish_backward()
    norm = s.clip_grad_norm_(0.0)
    verdict = doctor.check_step(step, loss, norm, shadow=action == "shadow")
    if verdict == "ok" and opt is not None:
        s.optimizer_step(opt)
    s.zero_grad(opt) if opt is not None else s.module.zero_grad(set_to_none=True)
    return verdict, doctor.after_step(step)


def _nan_and_corruption(run_dir):
    from shardlab.doctor import Doctor
    cfg = tiny_cfg(debug__inject_nan="2:1:blocks.2.mlp", debug__corrupt_rank="1@3", doctor__checksum_every=2,
                   doctor__on_anomaly="skip", doctor__hang_timeout_s=0.0)
    s = _strategy(cfg)
    opt = torch.optim.SGD(s.model.parameters(), lr=0.1)
    doctor = Doctor(cfg, run_dir, s, comm.rank(), comm.world_size())
    replicated = [n for n, _ in checksum.replicated_parameters(s)]
    corrupted = replicated[len(replicated) // 2]  # the one inject.corrupt_parameter perturbs
    # The local gradient hook runs before the DDP all-reduce: only rank 1 sees its own NaN.
    verdicts = [_step(doctor, s, step, opt) for step in range(5)]
    out = doctor.close()
    return verdicts, out, doctor.last_report, corrupted


def test_nan_is_pinned_to_rank_step_module_and_corruption_to_rank_param(pool2, tmp_path):
    res = pool2.run(_nan_and_corruption, str(tmp_path), timeout=60)
    (v0, out0, rep0, corrupted), (v1, *_rest) = res
    assert v0 == v1  # identical verdicts on every rank
    assert [v[0] for v in v0] == ["ok", "ok", "skip", "ok", "ok"]
    report = json.loads((tmp_path / "anomalies" / "step_2.json").read_text())
    assert report["step"] == 2 and report["ranks"] == [1] and report["local_grad_hooks"]
    assert report["per_rank"]["1"]["localisation"]["module"] == "blocks.2.mlp"
    assert report["per_rank"]["0"]["localisation"] is None  # rank 0 was healthy: not replayed
    # corruption after step 3 -> the checksum after step 3 ((3+1) % 2 == 0) names rank 1 and the parameter
    assert v0[3][1] == "ok" and not out0["ranks_consistent"] and out0["anomalies"] == 1
    div = json.loads((tmp_path / "doctor" / "divergence_step_3.json").read_text())
    assert div["first"]["ranks"] == [1] and div["first"]["param"] == corrupted  # the parameter injected into
    assert div["first"]["detail"]["1"]["n_diff"] == 1
    assert "REPLICAS DIVERGED: rank 1 differs from rank 0" in div["summary"]


def _early_check(run_dir):
    from shardlab.doctor import Doctor
    cfg = tiny_cfg(debug__inject_nan="1:1:blocks.0.mlp", doctor__on_anomaly="skip", doctor__hang_timeout_s=0.0,
                   parallel__first_bucket_mb=0.01, parallel__bucket_mb=0.01)  # several buckets in flight
    s = _strategy(cfg)
    doctor = Doctor(cfg, run_dir, s, comm.rank(), comm.world_size())
    opt = torch.optim.SGD(s.model.parameters(), lr=0.1)
    verdicts = [_step(doctor, s, step, opt, launch_early=True)[0] for step in range(2)]
    order = comm.RECORDER.order  # (the ring also holds earlier tests' records of this worker)
    verdicts.append(_step(doctor, s, 2, opt, launch_early=True)[0])
    recs = [r for r in comm.RECORDER.ring if r.order > order]
    check = next(r for r in recs if r.tag == "doctor check")
    waits = [r.t_wait for r in recs if r.tag.startswith("bucket")]
    doctor.close(final_checksum=False)
    return verdicts, doctor.last_report["ranks"], check.async_op, check.t_launch, waits


def test_check_launched_before_the_gradient_wait_gives_the_same_verdicts(pool2, tmp_path):
    # The trainer starts the check's all-gather right after backward, so it travels with the last
    # buckets; the verdict is still taken before the optimizer step of the same step, the same everywhere.
    (v0, ranks, is_async, t_launch, waits), (v1, *_rest) = pool2.run(_early_check, str(tmp_path), timeout=60)
    assert v0 == v1 == ["ok", "skip", "ok"] and ranks == [1]  # the NaN on rank 1 at step 1 is caught at step 1
    assert is_async and len(waits) > 1 and all(t_launch < w for w in waits)


def _uneven(run_dir, mode):
    from shardlab.doctor import Doctor, UnevenInputsError
    cfg = tiny_cfg(debug__uneven_rank="1@2", doctor__hang_timeout_s=0.0)
    cfg.data.uneven = mode
    s = _strategy(cfg)
    doctor = Doctor(cfg, run_dir, s, comm.rank(), comm.world_size())
    t0 = time.monotonic()
    try:
        verdicts = [_step(doctor, s, step)[0] for step in range(4)]
    except UnevenInputsError as e:
        return str(e), time.monotonic() - t0
    finally:
        doctor.close(final_checksum=False)
    return verdicts, doctor.close()["ranks_consistent"]


def test_uneven_inputs_error_on_every_rank_or_join(pool2, tmp_path):
    (m0, dt0), (m1, _) = pool2.run(_uneven, str(tmp_path), "error", timeout=60)
    assert m0 == m1 and "step 2: rank 1 ran out of data while rank(s) 0 still have some" in m0 and dt0 < 30
    (v0, ok0), (v1, ok1) = pool2.run(_uneven, str(tmp_path), "join", timeout=60)
    assert v0 == v1 == ["ok"] * 4
    assert ok0 is True and ok1 is True  # joining (zero-weight shadow steps) kept the replicas identical


def _watched_hang(run_dir):
    from shardlab.doctor.watchdog import Watchdog
    wd = Watchdog(Path(run_dir), comm.rank(), 2, timeout_s=0.5, exit_on_hang=False)
    comm.all_reduce(torch.ones(4), tag="warm-up")
    if comm.rank() == 1:
        comm.set_phase("data loading")
        time.sleep(2.0)  # rank 0 waits in the next all_reduce meanwhile: both watchdogs fire
    comm.all_reduce(torch.ones(1000), tag="bucket 0")
    wd.stop()
    return wd.fired


def _watched_buckets(run_dir):
    """Like DDP at a hang: rank 0 launches two async bucket all-reduces and waits on the first while
    rank 1 is late. The watchdog used to name the newest pending one (#N+1), doctor hang the oldest (#N)."""
    from shardlab.doctor.watchdog import Watchdog
    wd = Watchdog(Path(run_dir), comm.rank(), 2, timeout_s=0.5, exit_on_hang=False)
    comm.all_reduce(torch.ones(4), tag="warm-up")
    if comm.rank() == 1:
        comm.set_phase("data loading")
        time.sleep(2.0)
    handles = [comm.all_reduce(torch.ones(1000), async_op=True, tag=f"bucket{i}") for i in range(2)]
    for h in handles:
        h.wait()
    wd.stop()
    return wd.where


def test_watchdog_and_doctor_hang_give_the_same_collective_number(pool2, tmp_path):
    where = pool2.run(_watched_buckets, str(tmp_path), timeout=60)
    res = hang.report(tmp_path)
    assert res["kind"] == "hang" and res["absent"] == [1], res["lines"]
    assert res["op"].startswith("all_reduce #") and "(bucket0," in res["op"]
    assert where[0] == f"blocked in {res['op']}"


def test_watchdog_dumps_and_hang_analysis_names_the_absent_rank(pool2, tmp_path):
    fired = pool2.run(_watched_hang, str(tmp_path), timeout=60)
    assert all(f and "no progress" in f for f in fired)
    res = hang.report(tmp_path)
    assert res["kind"] == "hang" and res["absent"] == [1], res["lines"]
    assert "rank 1 never joined all_reduce" in res["lines"][0] and "(bucket 0, 4.0 kB)" in res["lines"][0]
    assert "it was in: data loading" in res["lines"][0]


def _verified_mismatch(run_dir):
    from shardlab.doctor import Doctor
    cfg = tiny_cfg(debug__mismatch_rank="1@1", doctor__verify_collectives=True, doctor__hang_timeout_s=30.0)
    s = _strategy(cfg)
    doctor = Doctor(cfg, run_dir, s, comm.rank(), comm.world_size())
    try:
        for step in range(3):
            _step(doctor, s, step)
    except comm.CollectiveMismatchError as e:
        doctor.dump(f"error: {e}")
        return str(e)
    finally:
        doctor.close(final_checksum=False)
        comm.RECORDER.verify = False


def test_mismatch_is_reported_as_a_mismatch(pool2, tmp_path):
    msgs = pool2.run(_verified_mismatch, str(tmp_path), timeout=60)
    assert msgs[0] == msgs[1] and "collective mismatch at sequence" in msgs[0] and "step 1" in msgs[0]
    res = hang.report(tmp_path)
    assert res["kind"] == "mismatch" and "MISMATCH" in res["lines"][0]
    # the doctor's check gathers 8 float64 per rank (2 x 64 B); the faulty rank sends 9 (2 x 72 B)
    assert "rank 0: all_gather 128 B" in res["lines"][1] and "rank 1: all_gather 144 B" in res["lines"][2]


SIGTERM_SCRIPT = """
import sys, time
from shardlab import comm
from shardlab.doctor.watchdog import Watchdog
wd = Watchdog(sys.argv[1], 0, 2, timeout_s=60)
comm.set_phase("backward")
print("ready", flush=True)
time.sleep(60)
"""


def test_sigterm_from_the_launcher_writes_the_flight_record(tmp_path):
    import signal
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", SIGTERM_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        p.kill()
    dump = json.loads((tmp_path / "doctor" / "flight_rank0.json").read_text())
    assert dump["reason"].startswith("terminated by SIGTERM") and dump["phase"] == "backward"
