"""How a multi-rank run ends when something outside it goes wrong: a rank killed (kill -9, the OOM killer), an
elastic restart before the first checkpoint, a reader that closed the pipe (`| head`); and what a run leaves
behind (no empty failures/ or launcher.log). Each drill is 2 tiny ranks, seconds long."""
import json
import os
import re
import signal
import subprocess
import sys
import time

from shardlab.launch import failure

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.log_every=2", "train.eval_every=0",
        "train.warmup_steps=1", "ckpt.final=false"]


def _rank_pid(run_dir, rank: int) -> int | None:
    """The pid of rank `rank` (first attempt) of the job writing to `run_dir`, found through /proc."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = dict(e.split(b"=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if str(run_dir).encode() in cmd and env.get(b"RANK") == str(rank).encode() \
                and env.get(b"TORCHELASTIC_RESTART_COUNT", b"0") == b"0" and b"torch.distributed.run" not in cmd:
            return int(pid)
    return None


def _kill_rank1_once_training(run, args: list[str], timeout: float = 120) -> tuple[subprocess.Popen, str, bool]:
    """Start `shardlab train --nproc 2 --out RUN ARGS`, SIGKILL rank 1 once the first step is logged, return
    (the process, its stdout+stderr, whether rank 1 was killed)."""
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--out", str(run), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    killed = False
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not killed:
            metrics = run / "metrics.jsonl"
            if metrics.is_file() and metrics.stat().st_size > 0:
                pid = _rank_pid(run, 1)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, out, killed


def test_a_killed_rank_ends_with_the_verdict_and_the_others_echoes_in_one_line(tmp_path):
    """kill -9 of rank 1 (what the OOM killer does): rank 0's collective fails with gloo's "Connection closed (or reset) by
    peer"; its traceback is not printed but kept in its record, one line says so, and the verdict is last."""
    run = tmp_path / "run"
    # rank 1 sleeps 100 ms a step: the run is still going when it is killed
    proc, out, killed = _kill_rank1_once_training(run, [*TINY, "train.steps=200", "debug.slow_rank=1",
                                                        "debug.slow_ms=100"])
    assert killed, out[-3000:]
    assert proc.returncode == 1, out[-3000:]
    last = out.strip().splitlines()[-4:]
    # gloo words the dead socket "closed by peer" or "reset by peer" depending on which side noticed first
    said = re.fullmatch(r"shardlab: rank 0 stopped when a peer died \(RuntimeError: Connection (closed|reset) by "
                        r"peer\): an echo of the failure below; traceback in (.*)/failures/rank0\.json", last[0])
    assert said and said.group(2) == str(run), out[-3000:]
    words = f"Connection {said.group(1)} by peer"
    assert last[1].startswith("shardlab: FAILED: rank 1 was killed by SIGKILL (often the kernel's out-of-memory killer")
    assert last[3] == "shardlab: exit code 1 (crash)"
    assert "Traceback" not in out and out.count(words) == 1, out[-3000:]
    record = json.loads((run / "failures" / "rank0.json").read_text())
    assert record["echo"] is True and words in record["traceback"]
    assert "Traceback (most recent call last)" in record["traceback"]


def test_only_recorded_echoes_are_kept_off_the_terminal(tmp_path, capsys, monkeypatch):
    """A rank's own error (the one that failed first) prints its traceback; an echo only once it is recorded."""
    import sys as _sys

    printed = []
    monkeypatch.setattr(_sys, "excepthook", lambda kind, exc, tb: printed.append(exc))
    failure.quiet_echoes()
    echo = RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:1234. This is typically ...")
    own = ValueError("bad")
    unrecorded = RuntimeError("Connection reset by peer")
    for exc in (echo, own):
        try:
            raise exc
        except Exception as e:  # noqa: BLE001
            failure.record(tmp_path, 0 if e is echo else 1, "crash", e)
    for exc in (echo, own, unrecorded):
        _sys.excepthook(type(exc), exc, exc.__traceback__)
    assert printed == [own, unrecorded]
    assert failure.is_echo(unrecorded) and not failure.is_echo(own) and not failure.is_echo(RuntimeError("x"))
    assert "echo" not in json.loads((tmp_path / "failures" / "rank1.json").read_text())


def test_the_verdict_blames_the_rank_that_failed_not_its_echoes(tmp_path):
    fails = tmp_path / "failures"
    fails.mkdir()
    echo = {"rank": 0, "kind": "crash", "time": 1.0, "echo": True, "traceback": "...",
            "error": "RuntimeError: [/x/pair.cc:553] Connection closed by peer [127.0.0.1]:13724. This is typically"}
    (fails / "rank0.json").write_text(json.dumps(echo))
    (fails / "rank2.json").write_text(json.dumps({**echo, "rank": 2, "time": 1.5}))
    (fails / "rank1.json").write_text(json.dumps({"rank": 1, "kind": "crash", "time": 2.0, "where": "x.py:3 in f",
                                                  "error": "ValueError: bad"}))
    (fails / "launcher.json").write_text(json.dumps({"failures": {str(r): {"exitcode": 1, "signal": None}
                                                                  for r in (0, 1, 2)}}))
    lines, code = failure.verdict(tmp_path, 1)
    assert code == 1 and lines == [
        "shardlab: ranks 0, 2 stopped when a peer died (RuntimeError: Connection closed by peer): an echo of the "
        f"failure below; tracebacks in {tmp_path}/failures/rank*.json",
        "shardlab: FAILED: rank 1 raised ValueError: bad at x.py:3 in f (its traceback is above).",
        "shardlab: exit code 1 (crash)"]
    # a rank that died saying nothing (exit 1, no record) is blamed before the echoes of it
    (fails / "rank1.json").unlink()
    lines, _ = failure.verdict(tmp_path, 1)
    assert lines[1] == "shardlab: FAILED: rank 1 exited with code 1 (its output is above)."
    # only echoes: the first is named, with where its traceback is
    (fails / "launcher.json").write_text(json.dumps({"failures": {"0": {"exitcode": 1, "signal": None},
                                                                  "2": {"exitcode": 1, "signal": None}}}))
    lines, _ = failure.verdict(tmp_path, 1)
    assert lines[0].startswith("shardlab: FAILED: rank 0 lost its connection to a peer first: RuntimeError: "
                               "Connection closed by peer (no rank reported an error of its own")


def test_an_elastic_restart_before_the_first_checkpoint_says_it_starts_over(tmp_path):
    """kill -9 under --max-restarts 1 with no checkpoint written yet: the job restarts from step 0 and says so
    (not "resuming from the latest checkpoint"), and finishes."""
    run = tmp_path / "run"
    proc, out, killed = _kill_rank1_once_training(run, ["--max-restarts", "1", *TINY, "train.steps=10",
                                                        "debug.slow_rank=1", "debug.slow_ms=50"])
    assert killed, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert "elastic restart: no checkpoint yet, restarting from step 0" in out, out[-3000:]
    assert "resuming from the latest checkpoint" not in out
    assert json.loads((run / "summary.json").read_text())["steps"] == 10


def test_a_closed_stdout_does_not_stop_the_run_and_a_clean_run_leaves_no_empty_records(tmp_path):
    """`shardlab train ... | head -1`: the reader goes after the first line; rank 0 keeps printing (step lines,
    the summary) into the closed pipe and the run completes, exit 0, every file written; no failure recorded.
    A clean run leaves no failures/ and no launcher.log (both exist only with something in them)."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--out", str(run), *TINY, "train.steps=8",
           "train.eval_every=4", "train.eval_seqs=8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        proc.stdout.close()  # what head does after its lines
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert first and proc.returncode == 0, err[-3000:]
    assert "BrokenPipeError" not in err and "FAILED" not in err, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 8 and (run / "loss.png").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6, 8]
    assert not (run / "failures").exists() and not (run / "launcher.log").exists()
