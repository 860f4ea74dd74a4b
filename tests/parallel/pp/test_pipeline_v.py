"""The V placement (rank r holds stages r and 2p-1-r) under the own and torch's rows: torch's ZB-V and
DualPipeV are the own programs action for action on the same stage-to-rank map; with activation recompute
they equal the run without, bitwise; the tied embedding is one parameter on rank 0 (first and last stage);
a checkpoint resumes bitwise and moves to and from a 1F1B layout; refusals are one line.

Parity with one device (float64, with ddp, zero1, zero2, tp=2) is in test_pipeline_train.py; packed
documents in test_pp_docmask.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from shardlab.parallel.pp import ScheduleError, build

V_ROWS = {"zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}
V4 = ["model.n_layer=4", "parallel.pp=2", "parallel.pp_virtual=2"]  # 4 stages: 2 ranks x 2


def _torch_program(cls, p: int, m: int, r: int) -> list[tuple]:
    """(op, stage, mb) of torch's compute-only program for rank r (an overlapped F+B pair as its two
    halves, in order), computed as torch computes it, without stages or a process group."""
    from torch.distributed.pipelining.schedules import OVERLAP_F_B

    this = SimpleNamespace(pp_group_size=p, _n_microbatches=m, num_stages=2 * p, _num_stages=2 * p,
                           n_local_stages=2)
    out = []
    for a in cls._calculate_single_rank_operations(this, r):
        for s in (a.sub_actions if a is not None and a.computation_type == OVERLAP_F_B else (a,)):
            if s is not None:
                out.append((s.computation_type.value, s.stage_index, s.microbatch_index))
    return out


@pytest.mark.parametrize("name", list(V_ROWS))
def test_torch_v_schedules_are_the_own_programs_on_the_same_placement(name):
    """At p = 2..8 and every m the row takes up to 3p: torch's stage-to-rank map (style "v") is the own
    placement, and every rank's compute actions are the own program's, in order."""
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    cls, checked = getattr(schedules, V_ROWS[name]), 0
    for p in range(2, 9):
        to_rank = generate_stage_to_rank_mapping(p, 2 * p, style="v")
        for m in range(1, 3 * p + 1):
            try:
                s = build(name, p, m)
            except ScheduleError:
                continue
            assert all(to_rank[st] == s.rank_of(st) for st in range(2 * p))
            for r in range(p):
                mine = [(i.op, i.stage, i.mb) for i in s.ranks[r] if i.op in ("F", "B", "I", "W")]
                assert mine == _torch_program(cls, p, m, r), (name, p, m, r)
            checked += 1
    assert checked == {"zbv": 105, "dualpipev": 42}[name]  # schedules (all their ranks' programs)


@pytest.mark.parametrize("schedule", ["zbv", "dualpipev", "torch-zbv", "torch-dualpipev"])
def test_v_rows_take_their_microbatches(schedule):
    """torch's rows take what the own program takes (ZB-V any m, DualPipeV m >= 2p), not a multiple of p."""
    from shardlab.config import load, validate

    validate(load(None, ["model.preset=tiny", *V4, f"parallel.pp_schedule={schedule}", "train.grad_accum=5"]), 2)


def _placement(schedule: str) -> dict:
    """On each rank: its stages, whether an embedding group exists, and whether the chunks it runs share
    one tied embedding (the same Parameter object)."""
    import step_driver as driver

    cfg, par = driver.build([f"parallel.pp_schedule={schedule}", *V4, "train.grad_accum=4"],
                            ["model.preset=tiny", "train.seq_len=16"])
    ex = par.executor
    weights = {id(m.wte.weight) for m in ex.modules.values() if getattr(m, "wte", None) is not None}
    return {"stages": list(ex.stage_ids), "embed_group": ex.embed_group is not None, "wte": len(weights)}


@pytest.mark.parametrize("schedule", ["zbv", "torch-dualpipev"])
def test_tied_embedding_is_one_parameter_on_the_rank_of_the_first_and_last_stage(pool2, schedule):
    got = pool2.run(_placement, schedule, timeout=300)
    assert [g["stages"] for g in got] == [[0, 3], [1, 2]]
    assert not any(g["embed_group"] for g in got)  # no group to sum the two ends over: they are one rank's
    assert got[0]["wte"] == 1  # both chunks of rank 0 hold the same Parameter


PP_V = [*V4, "train.micro_batch=1", "train.grad_accum=4"]


@pytest.mark.parametrize("schedule", ["zbv", "dualpipev", "torch-zbv", "torch-dualpipev"])
def test_recompute_under_v_schedules_is_bitwise_the_run_without(pool2, schedule):
    """Split backward with recompute: an I's recompute hands back a detached copy of each saved weight, so
    the W accumulates into the Linear's parameter itself (zero_bubble.py); torch's split backward runs a
    second backward through the graph, which selective recompute refuses (refused before launch)."""
    from memory_harness import composed_modes

    modes = ("none", "full") if schedule.startswith("torch-") else ("none", "full", "selective")
    out = pool2.run(composed_modes, PP_V + [f"parallel.pp_schedule={schedule}"], modes=modes, timeout=400)
    for rank_out in out:
        for mode in modes[1:]:
            assert rank_out[mode]["losses"] == rank_out["none"]["losses"], mode
            assert rank_out[mode]["recomputed"], mode
            for k, want in rank_out["none"]["params"].items():
                assert torch.equal(rank_out[mode]["params"][k], want), (mode, k)


CKPT = ["model.n_layer=4", "parallel.pp=2", "train.steps=4"]
V_CKPT = {"zbv": ["parallel.pp_schedule=zbv", "parallel.pp_virtual=2"],
          "torch-zbv": ["parallel.pp_schedule=torch-zbv", "parallel.pp_virtual=2"],
          "1f1b": ["parallel.pp_schedule=1f1b"]}


@pytest.mark.parametrize("schedule", ["zbv", "torch-zbv"])
def test_v_checkpoint_resumes_bitwise(pool2, tmp_path, schedule):
    from ckpt_harness import assert_params_equal, train_run

    over = CKPT + V_CKPT[schedule]
    straight = pool2.run(train_run, tmp_path / "straight", over, 2, timeout=400)
    run = tmp_path / "resumed"
    pool2.run(train_run, run, over + ["ckpt.every=2"], 2, stop_after=2, timeout=400)
    resumed = pool2.run(train_run, run, over + ["ckpt.resume=latest"], 2, timeout=400)
    assert resumed[0]["start"] == 2
    assert [resumed[0]["losses"][s] for s in (3, 4)] == [straight[0]["losses"][s] for s in (3, 4)]
    for r in range(2):
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)


@pytest.mark.parametrize("saver,loader", [("zbv", "1f1b"), ("1f1b", "zbv")])
def test_v_checkpoint_reshards_to_and_from_1f1b(pool2, tmp_path, saver, loader):
    """A checkpoint holds the bare model's names: the V's 4 stages (rank 0: blocks 0 and 3) load into
    1F1B's 2 (rank 0: blocks 0-1) and back; the next steps are the saver's own (fp32, another order of
    the same sums: round-off only)."""
    from ckpt_harness import continue_from, train_quick

    ref = pool2.run(train_quick, tmp_path / "saver", CKPT + V_CKPT[saver] + ["ckpt.every=2"], 2, timeout=400)[0]
    path = tmp_path / "saver" / "checkpoints" / "step_000002"
    got = pool2.run(continue_from, [path], CKPT + V_CKPT[loader], 2, steps=2, timeout=400)[0][str(path)]
    assert got == pytest.approx(ref[2:], rel=1e-5)
