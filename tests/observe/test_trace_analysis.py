"""The trace analysis on synthetic timelines with known intervals: exact figures, no processes."""
import pytest

from shardlab.observe import analysis
from shardlab.observe.intervals import intersect, subtract, total, union


def span(name, t0, t1, cat="compute", **args):
    return {"name": name, "cat": cat, "t0": t0, "t1": t1, "args": args}


def coll(t0, t1, op="all_reduce", tag="", step=0, async_=False, t_wait=None, nbytes=1000, group_size=2):
    return {"name": op, "cat": "comm", "t0": t0, "t1": t1, "async": async_, "t_wait": t_wait,
            "args": {"op": op, "seq": 0, "group": "world", "group_size": group_size, "bytes": nbytes,
                     "wire_bytes": nbytes, "dtype": "float32", "tag": tag, "step": step, "phase": "backward"}}


def test_interval_arithmetic():
    a = union([(0, 2), (1, 3), (5, 6)])
    assert a == [(0, 3), (5, 6)]
    assert intersect(a, [(2, 5.5)]) == [(2, 3), (5, 5.5)]
    assert subtract(a, [(1, 2), (5.5, 9)]) == [(0, 1), (2, 3), (5, 5.5)]
    assert total(a) == 4


def one_rank_step():
    """Step 0 on [0, 10]: forward [0,3], backward [3,7], optimizer [7,9].
    Bucket 0 all-reduce async: launched 4, caller waits from 7, done 8 (ready at 4).
    Bucket 1 all-reduce async: launched 6, done 8.5 (waited from 8).
    A synchronous grad-norm all-reduce [8.5, 9] inside the optimizer span."""
    events = [span("step", 0, 10, cat="step", step=0), span("forward", 0, 3), span("backward", 3, 7),
              span("optimizer", 7, 9, cat="optim"),
              {"name": "bucket_ready", "cat": "compute", "t0": 4, "t1": None, "args": {"bucket": 0}},
              coll(4, 8, tag="bucket0", async_=True, t_wait=7),
              coll(6, 8.5, tag="bucket1", async_=True, t_wait=8),
              coll(8.5, 9, tag="grad_norm")]
    return analysis.from_events(0, events)


def test_overlap_and_exposed_are_exact():
    rt = one_rank_step()
    row = analysis.step_breakdown(rt, 0, 0, 10)
    # comm = [4, 9] = 5 s. compute = [0, 9] minus blocked [7, 9] = [0, 7] = 7 s.
    assert row["comm_s"] == pytest.approx(5.0)
    assert row["compute_s"] == pytest.approx(7.0)
    assert row["overlap_s"] == pytest.approx(3.0)  # [4, 7]
    assert row["overlap_pct"] == pytest.approx(60.0)
    assert row["exposed_comm_s"] == pytest.approx(2.0)  # [7, 9]


def test_exposed_time_is_split_by_tag_and_adds_up():
    rt = one_rank_step()
    # exposed [7, 9]: bucket0 (in flight [4, 8]) owns [7, 8], bucket1 the rest of its flight [8, 8.5],
    # the synchronous grad-norm all-reduce [8.5, 9]
    by_tag = analysis.exposed_by_tag(rt, 0, 10)
    assert by_tag == pytest.approx({"bucket0": 1.0, "bucket1": 0.5, "grad_norm": 0.5})
    assert sum(by_tag.values()) == pytest.approx(analysis.step_breakdown(rt, 0, 0, 10)["exposed_comm_s"])


def test_bucket_table():
    rt = one_rank_step()
    rows = analysis.bucket_table(rt, 0, 0, 10)
    assert [r["bucket"] for r in rows] == [0, 1]
    b0 = rows[0]
    assert (b0["ready_ms"], b0["launch_ms"], b0["done_ms"]) == (4000, 4000, 8000)
    assert b0["comm_ms"] == 4000 and b0["ready_to_launch_ms"] == 0
    assert rows[1]["ready_ms"] is None


def test_skew_names_the_late_rank_and_splits_wait_from_transfer():
    # Two ranks, two collectives. Rank 1 arrives 30 ms late at both; the transfer takes 5 ms.
    r0 = [span("step", 0.0, 1.0, cat="step", step=0), coll(0.100, 0.135), coll(0.500, 0.535)]
    r1 = [span("step", 0.0, 1.0, cat="step", step=0), coll(0.130, 0.135), coll(0.530, 0.535)]
    traces = {0: analysis.from_events(0, r0), 1: analysis.from_events(1, r1)}
    m = analysis.match_collectives(traces)
    assert len(m) == 2
    assert all(x["last_rank"] == 1 for x in m)
    assert m[0]["skew_ms"] == pytest.approx(30.0)
    assert m[0]["wait_ms"][0] == pytest.approx(30.0) and m[0]["wait_ms"][1] == pytest.approx(0.0)
    assert m[0]["transfer_ms"][0] == pytest.approx(5.0) and m[0]["transfer_ms"][1] == pytest.approx(5.0)
    s = analysis.straggler(m, [0, 1])
    assert s["rank"] == 1 and s["significant"] and s["last_share"] == 1.0
    assert s["median_late_by_ms"] == pytest.approx(30.0)


def test_clock_offsets_align_ranks():
    # Same physical moment, different perf_counter origins: the offsets make them coincide.
    a = analysis.from_events(0, [coll(100.0, 100.01)], offset=1000.0)
    b = analysis.from_events(1, [coll(5.0, 5.01)], offset=1095.0)
    m = analysis.match_collectives({0: a, 1: b})
    assert m[0]["skew_ms"] == pytest.approx(0.0, abs=1e-6)


def test_summarize_excludes_warmup_and_takes_medians():
    events = []
    # 10 steps of 1 s; comm [t+0.5, t+0.9]; compute [t, t+0.7] -> overlap 0.2/0.4 = 50 %, exposed 0.2.
    # Step 0 (warm-up) is different on purpose: no compute at all.
    for s in range(10):
        t = float(s)
        events += [span("step", t, t + 1, cat="step", step=s), coll(t + 0.5, t + 0.9, step=s, group_size=1, async_=True, t_wait=t + 0.9)]
        if s:
            events.append(span("backward", t, t + 0.7))
    out = analysis.summarize_traces({0: analysis.from_events(0, events)})
    assert out["warmup_steps_excluded"] == 1 and out["trace_steps"] == 9
    assert out["overlap_pct"] == pytest.approx(50.0)
    assert out["exposed_comm_s"] == pytest.approx(0.2)


def test_summarize_without_trace_gives_nulls(tmp_path):
    assert analysis.summarize(tmp_path) == {"overlap_pct": None, "exposed_comm_s": None}


def arrivals(lateness_ms: list[float], per_step: int = 3) -> list[dict]:
    """Matched world-2 collectives: at step i, rank 1 launches lateness_ms[i] after rank 0 (negative:
    before), the same at each of the step's `per_step` collectives; the transfer takes 1 ms."""
    out = []
    for step, d in enumerate(lateness_ms):
        for _ in range(per_step):
            wait = {0: max(d, 0.0), 1: max(-d, 0.0)}
            out.append({"step": step, "last_rank": 1 if d > 0 else 0, "late_by_ms": abs(d), "wait_ms": wait,
                        "transfer_ms": {0: 1.0, 1: 1.0}})
    return out


def test_a_consistently_late_rank_is_the_straggler():
    late = [30.0, 31.0, 29.5, 30.5, 30.2, 29.8, 30.1, 30.4]  # an injected 30 ms, a little jitter
    s = analysis.straggler(arrivals(late), [0, 1], {i: 0.2 for i in range(len(late))})
    assert s["rank"] == 1 and s["significant"] and s["reason"] is None
    assert s["median_late_by_ms"] == pytest.approx(30.15)
    assert s["late_pct_of_step"] == pytest.approx(15.075)


def test_a_small_steady_lateness_is_not_a_straggler():
    # The healthy run of the report: one rank last most of the time, 2.2 ms late on a 270 ms step.
    late = [2.2, 2.1, 2.3, -0.5, 2.2, 2.4, 2.0, 2.2]
    s = analysis.straggler(arrivals(late), [0, 1], {i: 0.27 for i in range(len(late))})
    assert s["rank"] == 1 and s["last_share"] >= 0.6 and not s["significant"]
    assert "of the 270 ms step" in s["reason"]


def test_lateness_within_its_own_spread_is_not_a_straggler():
    late = [12.0, -3.0, 25.0, 1.0, 9.0, -8.0, 30.0, 6.0, 4.0]  # late on average, but all over the place
    s = analysis.straggler(arrivals(late), [0, 1], {i: 0.1 for i in range(len(late))})
    assert s["rank"] == 1 and s["last_share"] >= 0.6 and not s["significant"]
    assert "chance" in s["reason"]


def test_alternating_lateness_is_not_a_straggler():
    s = analysis.straggler(arrivals([20.0, -20.0] * 4), [0, 1], {i: 0.1 for i in range(8)})
    assert not s["significant"] and "arrival order varies" in s["reason"]


def test_collectives_match_per_subgroup_by_comm_sequence_number():
    # World 4, two dp_shard groups [0, 1] and [2, 3] of the same name. In [2, 3] rank 3 is 20 ms late;
    # [0, 1] is on time. Rank 0 also sent a message (p2p is not a collective: left out of the skew).
    def sub(t0, t1, ranks, seq, peer=None, op="all_reduce"):
        c = coll(t0, t1, op=op)
        c["args"].update(group="dp_shard", group_ranks=ranks, seq=seq, peer=peer)
        return c
    traces = {0: [sub(0.100, 0.105, [0, 1], 1), sub(0.050, 0.06, [0, 2], 1, peer=2, op="send")],
              1: [sub(0.101, 0.105, [0, 1], 1)],
              2: [sub(0.100, 0.125, [2, 3], 1)],
              3: [sub(0.120, 0.125, [2, 3], 1)]}
    m = analysis.match_collectives({r: analysis.from_events(r, ev) for r, ev in traces.items()})
    assert [(x["group_ranks"], x["last_rank"]) for x in m] == [([0, 1], 1), ([2, 3], 3)]
    assert m[0]["skew_ms"] == pytest.approx(1.0) and m[1]["skew_ms"] == pytest.approx(20.0)
