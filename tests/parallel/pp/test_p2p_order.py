"""Point-to-point orders under NCCL's rules (parallel/p2p_order.py): the checker itself on small plans,
then every pipeline schedule's posting plan (the one the engine runs) and the generation lanes' plan
over a matrix of layouts; the engine's old receive-ahead order is shown to hang. Real runs' posting
logs are replayed in test_pipeline.py, test_cp.py and test_generate.py (their pools)."""
import pytest

from shardlab.parallel.p2p_order import (STREAM_MODELS, Msg, P2PDeadlock, P2PMismatch, Post, Task, Wait, check,
                                         check_all, lockstep_plans)
from shardlab.parallel.pp import ScheduleError, build
from shardlab.parallel.pp.posting import p2p_plans, plan


def lone(kind, peer, what="m"):
    return Post((Msg(kind, peer, what),), fused=False)


def test_two_lone_sends_toward_each_other_hang_and_a_fused_exchange_does_not():
    """NCCL's send blocks until its receive is there: each rank sending first, each alone, waits forever;
    the same two messages in one batch_isend_irecv on each side get through."""
    hang = {0: [lone("send", 1, "a"), lone("recv", 1, "b"), Wait(1)],
            1: [lone("send", 0, "b"), lone("recv", 0, "a"), Wait(1)]}
    for streams in STREAM_MODELS:
        with pytest.raises(P2PDeadlock, match="rank 0 waits"):
            check(hang, streams)
    ok = {0: [Post((Msg("send", 1, "a"), Msg("recv", 1, "b"))), Wait(0)],
          1: [Post((Msg("send", 0, "b"), Msg("recv", 0, "a"))), Wait(0)]}
    assert check_all(ok) == 2


def test_stream_models_differ_where_they_should():
    """`shared` (one stream for all peers) orders a receive from rank 1 before a send to rank 2; `pair`
    (a stream per peer) does not. And in `pair` a lone receive never meets a batched send: they are on
    different communicators."""
    ring = {0: [lone("recv", 1), lone("send", 2), Wait(0)],
            1: [lone("recv", 2), Wait(0), lone("send", 0)],
            2: [lone("recv", 0), Wait(0), lone("send", 1)]}
    assert check(ring, "pair") == 3
    with pytest.raises(P2PDeadlock):
        check(ring, "shared")
    mixed = {0: [Post((Msg("send", 1, "m"),)), Wait(0)], 1: [lone("recv", 0), Wait(0)]}
    assert check(mixed, "shared") == 1
    with pytest.raises(P2PDeadlock):
        check(mixed, "pair")


def test_a_message_meeting_the_wrong_receive_is_named():
    plans = {0: [lone("send", 1, "act 0->1 mb0"), lone("send", 1, "act 0->1 mb1")],
             1: [lone("recv", 0, "act 0->1 mb1"), lone("recv", 0, "act 0->1 mb0")]}
    with pytest.raises(P2PMismatch, match="message #1 from rank 0 to rank 1.*'act 0->1 mb0'.*'act 0->1 mb1'"):
        check(plans)


def test_lockstep_gives_plans_that_pass_and_refuses_programs_that_cannot_run():
    # three ranks in a ring passing one message round twice, each also sending back to its source
    progs = {0: [Task(makes=((1, "a1"),)), Task(needs=((2, "c1"),), makes=((1, "a2"),)), Task(needs=((2, "c2"),))],
             1: [Task(needs=((0, "a1"),), makes=((2, "b1"), (0, "back1"))),
                 Task(needs=((0, "a2"),), makes=((2, "b2"),))],
             2: [Task(needs=((1, "b1"),), makes=((0, "c1"),)), Task(needs=((1, "b2"),), makes=((0, "c2"),))]}
    progs[0].append(Task(needs=((1, "back1"),)))
    assert check_all(lockstep_plans(progs)) == 7
    with pytest.raises(ValueError, match="cannot run"):
        lockstep_plans({0: [Task(needs=((1, "x"),), makes=((1, "y"),))],
                        1: [Task(needs=((0, "y"),), makes=((0, "x"),))]})


def schedule_matrix():
    """gpipe / 1f1b / interleaved (V = 2, 3) / zb x pp 2..8 x microbatches 1..3pp, the valid ones."""
    out = []
    for name, virtuals in (("gpipe", (1,)), ("1f1b", (1,)), ("interleaved", (2, 3)), ("zb", (1,))):
        for v in virtuals:
            for pp in range(2, 9):
                for m in range(1, 3 * pp + 1):
                    try:
                        out.append(build(name, pp, m, v))
                    except ScheduleError:
                        continue
    return out


def test_every_schedule_posts_in_an_order_nccl_completes():
    """The posting plan the engine runs (posting.plan, `rounds`), replayed under both stream models:
    every message of every rank delivered, each into the buffer meant for it."""
    cases = schedule_matrix()
    assert len(cases) == 301
    for s in cases:
        sends = sum(i.op.startswith("SEND") for r in s.ranks for i in r)
        assert check_all(p2p_plans(s)) == sends, f"{s.name} pp={s.pp} m={s.microbatches} v={s.virtual}"


@pytest.mark.parametrize("name,pp,m,v", [("1f1b", 2, 4, 1), ("gpipe", 2, 1, 1), ("zb", 4, 8, 1),
                                         ("interleaved", 4, 8, 2), ("gpipe", 8, 24, 1)])
def test_the_old_receive_ahead_order_hangs_under_nccl(name, pp, m, v):
    """The engine's order before the posting plan: receives posted up to 4 per peer ahead of their
    instruction, lone sends. At p = 2 rank 0 queues its gradient receives before its first activation send while
    rank 1 queues its activation receives before its first gradient send."""
    s = build(name, pp, m, v)
    for streams in STREAM_MODELS:
        with pytest.raises(P2PDeadlock, match="rank 0 waits"):
            check(p2p_plans(s, "receive_ahead"), streams)
    check_all(p2p_plans(s))  # the order that replaced it


def test_fusing_each_run_of_sends_and_receives_is_not_enough_for_interleaved():
    """Megatron-style fusing of consecutive sends and receives serves GPipe, 1F1B and ZB-H1, but not
    interleaved 1F1B: why the engine batches by rounds instead."""
    check_all(p2p_plans(build("1f1b", 4, 8), "runs"))
    check_all(p2p_plans(build("zb", 4, 8), "runs"))
    with pytest.raises(P2PDeadlock):
        check(p2p_plans(build("interleaved", 2, 4, 2), "runs"))


@pytest.mark.parametrize("name,pp,m,v", [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2),
                                         ("interleaved", 3, 9, 3), ("zb", 4, 8, 1)])
def test_the_posting_plan_covers_every_message_once_and_sends_follow_their_compute(name, pp, m, v):
    s = build(name, pp, m, v)
    for r, instrs in enumerate(s.ranks):
        before = plan(s, r)
        posted = [j for k in range(len(instrs)) for b in before[k] for j in b]
        comm_ops = [k for k, i in enumerate(instrs) if i.op.startswith(("SEND", "RECV"))]
        assert sorted(posted) == comm_ops
        for k in range(len(instrs)):
            for b in before[k]:
                for j in b:
                    if instrs[j].op.startswith("SEND"):
                        # in the run of sends and receives right after the compute that made it
                        assert k <= j and all(instrs[x].op not in ("F", "B", "I", "W") for x in range(k, j))
                    else:
                        assert k <= j  # a receive is posted no later than the instruction that waits for it


def old_lanes(n_stages, n_lanes, max_new):
    """generate/lanes.py before its posting program: a blocking receive before each forward, a lone
    isend after."""
    plans = {}
    for st in range(n_stages):
        e, sends = [], []
        for step in range(max_new):
            for lane in range(n_lanes):
                if st or step:
                    src = st - 1 if st else n_stages - 1
                    e += [lone("recv", src, f"{'h' if st else 't'} {step - (not st)} {lane}"), Wait(len(e))]
                sends.append(len(e))
                last = st == n_stages - 1
                e.append(lone("send", 0 if last else st + 1, f"{'t' if last else 'h'} {step} {lane}"))
        if st == 0:
            for lane in range(n_lanes):
                e += [lone("recv", n_stages - 1, f"t {max_new - 1} {lane}"), Wait(len(e))]
        plans[st] = e + [Wait(p) for p in sends]
    return plans


def test_generation_lanes_post_in_an_order_nccl_completes_and_the_old_one_hangs():
    from shardlab.generate.lanes import p2p_plans as lane_plans

    n = 0
    for stages in range(2, 9):
        for lanes in range(1, 9):
            for max_new in (1, 3):
                assert check_all(lane_plans(stages, lanes, max_new)) == stages * lanes * max_new
                n += 1
    assert n == 112
    with pytest.raises(P2PDeadlock):
        check(old_lanes(2, 2, 3), "pair")


def test_v_placed_programs_post_in_an_order_nccl_completes():
    """On the V placement the tip's hand-off is local: the posting plan carries no message to the rank
    itself, and the checker completes every message at p = 2..8."""
    n = 0
    for pp in range(2, 9):
        for m in range(1, 3 * pp + 1):
            s = build("gpipe", pp, m, layout="v")
            sends = sum(i.op.startswith("SEND") for r in s.ranks for i in r)
            assert sends == 2 * m * (2 * pp - 2)  # 2p - 1 boundaries, one of them local, two ways each
            assert check_all(p2p_plans(s)) == sends
            n += 1
    assert n == sum(3 * pp for pp in range(2, 9))


def test_v_schedules_post_in_an_order_nccl_completes():
    """ZB-V and DualPipeV at p = 2..8, every valid m up to 3p: the posting plan completes under both stream
    models, each message into the buffer meant for it (147 schedules: 105 ZB-V, 42 DualPipeV)."""
    n = 0
    for name in ("zbv", "dualpipev"):
        for pp in range(2, 9):
            for m in range(1, 3 * pp + 1):
                try:
                    s = build(name, pp, m)
                except ScheduleError:
                    continue
                sends = sum(i.op.startswith("SEND") for r in s.ranks for i in r)
                assert check_all(p2p_plans(s)) == sends == 2 * m * (2 * pp - 2), f"{name} pp={pp} m={m}"
                n += 1
    assert n == 147
