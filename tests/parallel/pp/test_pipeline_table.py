"""Schedules written as tables of actions (parallel.pp_schedule=file:PATH, torch's CSV format): every
built-in schedule written out reads back as itself; a bad table is one line naming its first bad action,
before launch (exit 2); a table runs on the own engine and trains like one device (float64)."""
from __future__ import annotations

import pytest

from shardlab.parallel.pp import ScheduleError, build
from shardlab.parallel.pp.table import TableError, parse, to_csv

OWN = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1), ("zbv", 2), ("dualpipev", 2)]


@pytest.mark.parametrize("name,v", OWN)
def test_every_builtin_schedule_written_out_reads_back_as_itself(name, v):
    """With its messages derived (compute only) or as written: the same instructions, placement and
    stages per rank, at p = 2..4 and m = 1..2p."""
    n = 0
    for p in (2, 3, 4):
        for m in range(1, 2 * p + 1):
            try:
                s = build(name, p, m, v)
            except ScheduleError:
                continue
            for messages in (False, True):
                t = parse(to_csv(s, messages), name)
                assert (t.ranks, t.layout, t.virtual, t.microbatches) == (s.ranks, s.layout, s.virtual, m)
            n += 1
    assert n >= 3


BAD = {
    "0F0,0X1\n1F0,1B0\n": "rank 0, column 1: '0X1' is not an action",
    "0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n": "rank 0, column 1: 0B1 comes before 0F1",
    "0F0,0I0,0W0,0B0\n1F0,1B0\n": "rank 0, column 3: 0B0: microbatch 0's backward on stage 0 runs twice",
    "0F0,0B0\n1F0,1B0,1F1,1B1\n": "rank 0: 0F1 is missing",
    "0F0,0B0,1F1\n1F0,1B0\n": "rank 1, column 0: 1F0 is an action of stage 1, which rank 0 runs",
    "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n": "deadlock",
    "0F0,0SEND_F0,0B0\n1F0,1B0,1SEND_B0\n": "rank 0, column 2: 0B0 comes before 0RECV_B0",
    "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0\n": "rank 1: 1SEND_B0 is missing (stage 0 receives it)",
    "0F0,1F0,1B0,0B0\n2F0,3F0,3B0,2B0\n": "stage 1 on rank 0: stages must be placed as the loop",
}


@pytest.mark.parametrize("text,needle", list(BAD.items()))
def test_a_bad_table_is_one_line_naming_its_first_bad_action(text, needle):
    with pytest.raises(TableError) as e:
        parse(text, "t.csv")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_bad_table_is_refused_before_launch(tmp_path, capsys, monkeypatch):
    from test_pipeline_cli import ROOT
    from shardlab import cli

    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0B1,0F1,0B0\n1F0,1B0,1F1,1B1\n")
    monkeypatch.chdir(ROOT)
    code = cli.cmd_train(["--nproc", "2", "--out", str(tmp_path / "run"), "--config", "configs/tiny.toml",
                          "train.global_batch=0", "parallel.pp=2", "train.grad_accum=2",
                          f"parallel.pp_schedule=file:{bad}"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "rank 0, column 1: 0B1 comes before 0F1" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_pp_show_prints_the_table_and_the_diagram(capsys, tmp_path):
    from shardlab.parallel.pp import cli

    assert cli.main(["show", "zbv", "--p", "4", "--m", "8"]) == 0
    out = capsys.readouterr().out
    assert "layout v (rank 0 holds s0, s7" in out and to_csv(build("zbv", 4, 8)) in out
    assert "rank 3 |" in out and "bubble 6%" in out
    assert cli.main(["show", "dualpipev", "--p", "2", "--m", "4", "--table-only"]) == 0
    (tmp_path / "d.csv").write_text(capsys.readouterr().out)
    assert cli.main(["show", f"file:{tmp_path / 'd.csv'}"]) == 0
    assert cli.main(["show", "pipedream"]) == 2


@pytest.mark.parity
@pytest.mark.parametrize("name,v", [("zbv", 2), ("1f1b", 1)])
def test_a_table_trains_like_one_device(pool2, tmp_path, name, v):
    """The V table of ZB-V (messages as written) and 1F1B's (compute only) on the own engine, float64."""
    from pipeline_harness import train
    from shardlab.testing import assert_float64_equal, in_float64

    path = tmp_path / f"{name}.csv"
    path.write_text(to_csv(build(name, 2, 4, v), messages=name == "zbv"))
    ref = in_float64(train, 3, dp="single")
    got = pool2.run(in_float64, train, 3, timeout=300, pp=2, pp_schedule=f"file:{path}", pp_virtual=v)
    merged = {}
    for r in got:
        assert_float64_equal(r["losses"], ref["losses"], "losses")
        merged.update(r["params"])
    assert_float64_equal(merged, ref["params"])
