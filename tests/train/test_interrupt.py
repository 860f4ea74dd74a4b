"""Interrupted runs lose nothing: SIGINT/SIGTERM stop every rank at a step boundary with a checkpoint and
exit 130/143; SIGKILL leaves no orphan; one writer per run directory. Six drills of the chaos matrix
(bench/chaos.py: tiny model, 2 ranks, each resumed and compared bitwise with an uninterrupted run) and
the lock, the vote and the last lines without a process."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from cli_harness import as_rank
from shardlab.launch import failure, interrupt, runlock
from shardlab.bench import chaos


# --- the lock -------------------------------------------------------------------------------------

def _lock(run, **entry):
    held = {"job": "j1", "host": socket.gethostname(), "pid": os.getpid(), "pid_start": runlock.start_time(os.getpid()),
            "time": 0.0}
    held.update(entry)
    run.mkdir(parents=True, exist_ok=True)
    (run / runlock.NAME).write_text(json.dumps(held))
    return held


def test_a_live_lock_refuses_a_second_writer_and_writes_nothing(tmp_path):
    run = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(run, pid=sleeper.pid, pid_start=runlock.start_time(sleeper.pid))
        before = sorted(p.name for p in run.iterdir())  # the lock only
        for args in (["train", "--out", str(run), "model.preset=tiny"], ["resume", str(run)]):
            if args[0] == "resume":  # resume needs a run with a checkpoint to get as far as the lock
                (run / "config.toml").write_text("")
            res = subprocess.run([sys.executable, "-m", "shardlab", *args], capture_output=True, text=True,
                                 timeout=120)
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2 and len(lines) == 1, res.stderr
            assert "is in use by a live run" in lines[0] and f"pid {sleeper.pid}" in lines[0]
            assert sorted(p.name for p in run.iterdir()) == before + (["config.toml"] if args[0] == "resume" else [])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stale_lock_is_taken_over_with_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock(run, pid=dead.pid, pid_start=12345)
    lock = runlock.acquire(run)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "taking over the stale lock" in err[0] and f"pid {dead.pid}" in err[0]
    held = json.loads((run / runlock.NAME).read_text())
    assert held["pid"] == os.getpid() and held["pid_start"] == runlock.start_time(os.getpid())
    with pytest.raises(runlock.RunLocked, match="in use by a live run"):
        runlock.acquire(run)  # now it is ours, and alive
    lock.release()
    assert not (run / runlock.NAME).exists()


def test_a_reused_pid_is_a_stale_lock(tmp_path, capsys):
    run = tmp_path / "run"
    _lock(run, pid_start=runlock.start_time(os.getpid()) - 1)  # our pid, but another process's start time
    runlock.acquire(run).release()
    assert "taking over the stale lock" in capsys.readouterr().err


def test_a_lock_from_another_host_needs_break_lock(tmp_path, capsys):
    run = tmp_path / "run"
    _lock(run, host="elsewhere-node", pid=1)
    with pytest.raises(runlock.RunLocked, match="--break-lock"):
        runlock.acquire(run)
    runlock.acquire(run, break_lock=True).release()
    assert "breaking the lock" in capsys.readouterr().err


# --- the vote and the last lines -------------------------------------------------------------------

def test_a_duplicate_signal_is_one_event():
    old = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    interrupt.reset()
    try:
        interrupt.install(grace_s=0)
        vote = interrupt.StopVote()  # one process: the vote is the local signal
        assert vote.check() == 0
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's copy and the launcher's: still alive
        assert interrupt.pending() == signal.SIGTERM
        assert vote.check() == 0 and vote.check() == signal.SIGTERM  # read one boundary after it was started
    finally:
        interrupt.reset()
        for s, h in old.items():
            signal.signal(s, h)


def test_last_lines_after_a_signal(tmp_path):
    (tmp_path / "checkpoints" / "step_000004").mkdir(parents=True)
    (tmp_path / "checkpoints" / "latest").write_text("step_000004\n")
    stop = interrupt.Interrupted(signal.SIGTERM, 4, tmp_path / "checkpoints" / "step_000004", 0.5)
    failure.record_interrupted(tmp_path, stop)
    lines, code = failure.interrupted(tmp_path)
    assert code == 143 and len(lines) == 3
    assert lines[0] == "shardlab: interrupted by SIGTERM: every rank stopped after step 4."
    assert "checkpoint written" in lines[1] and lines[2] == f"shardlab: resume: shardlab resume {tmp_path}"
    lines, code = failure.interrupted(tmp_path, signal.SIGINT, aborted=True)  # the launcher's second Ctrl-C
    assert code == 130 and "twice" in lines[0] and "latest is step_000004 (untouched)" in lines[1]
    assert failure.interrupted(tmp_path / "other") is None


# --- a signal during the last step or the final save, in one process (deterministic) -----------------
# The signal is sent from inside the run at the exact moment (the last step's forward, the final save's
# write), so no timing decides where it lands. The run must end interrupted, not completed: every rank
# stopped after the last step, that step's checkpoint written (the final save, not repeated), exit 130/143.
ONE = ["--nproc", "1", "model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.eval_every=0",
       "train.log_every=1", "train.warmup_steps=1", "train.steps=4", "train.threads=1", "parallel.strategy=single"]


@pytest.mark.parametrize("signame,moment,extra", [
    ("SIGTERM", "last-step", ["ckpt.every=2", "ckpt.async=false"]),
    ("SIGINT", "last-step", ["ckpt.every=3", "ckpt.async=true"]),
    ("SIGTERM", "final-save", ["ckpt.every=3", "ckpt.async=false"]),  # the final save is close()'s own
    ("SIGINT", "final-save", ["ckpt.every=2", "ckpt.async=true"]),  # the last periodic save, in flight
])
def test_a_signal_during_the_last_step_or_the_final_save_ends_interrupted(tmp_path, monkeypatch, capsys,
                                                                          signame, moment, extra):
    from shardlab.checkpoint import manifest as mf, storage
    from shardlab.cli import cmd_train
    from shardlab.train.trainer import Trainer

    sig, sent = getattr(signal, signame), []

    def send(where: str) -> None:
        if not sent:
            sent.append(where)
            os.kill(os.getpid(), sig)  # the handler only notes it: the run goes on to its next boundary

    train_step, delay = Trainer.train_step, storage.injected_delay

    def last_step(self):
        if self.state.step == self.cfg.train.steps - 1:
            send("last step")
        return train_step(self)

    def final_save(kind: str, step: int = 0) -> None:
        if kind == "save" and step == 4:
            send("final save")
        return delay(kind, step)

    if moment == "last-step":
        monkeypatch.setattr(Trainer, "train_step", last_step)
    else:
        monkeypatch.setattr(storage, "injected_delay", final_save)
    run = tmp_path / "run"
    code = cmd_train(["--out", str(run), *ONE, *extra])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("shardlab:")]
    assert sent, "the signal was never sent: the moment was not reached"
    assert code == 128 + sig, (code, lines)
    assert len(lines) == 3 and lines[0] == f"shardlab: interrupted by {signame}: every rank stopped after step 4.", lines
    assert "checkpoint written" in lines[1] and "step_000004" in lines[1], lines
    assert mf.read_latest(run / "checkpoints").name == "step_000004"
    assert json.loads((run / "failures" / "rank0.json").read_text())["kind"] == "interrupted"


# --- drills of the chaos matrix -------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, pool2):
    """The uninterrupted run's directory (its checkpoints at every chaos.EVERY steps) and final parameters:
    chaos.reference's run (`shardlab train RUN_ARGS`) as what each of its 2 ranks runs, on the session's pool
    (cli_harness.as_rank); the drills and their resumes are real launches."""
    run = tmp_path_factory.mktemp("chaos") / "reference"
    ranks = pool2.run(as_rank, ["train", "--out", str(run), *chaos.RUN_ARGS], timeout=240)
    assert [code for code, _, _ in ranks] == [0, 0], [err[-2000:] for _, _, err in ranks]
    return run, chaos.final_params(run)


@pytest.fixture(scope="module")
def reference(reference_run):
    return reference_run[1]


# The widened save or load a drill signals into (chaos.WINDOW_S, 3 s, in `shardlab bench chaos`): the signal
# reaches the ranks ~0.05 s after the window opens (0.02-0.16 s measured on 2 cores), and a soft signal's drill
# sits the whole window out.
WINDOW_S = 1.0

DRILLS = [("SIGINT", "group", "mid-step"), ("SIGTERM", "rank1", "mid-step"), ("SIGTERM", "launcher", "async-save"),
          ("SIGINT", "rank0", "resume-load"), ("SIGKILL", "launcher", "mid-step"), ("SIGKILL", "rank1", "async-save")]


@pytest.mark.parametrize("signame,target,moment", DRILLS)
def test_drill(tmp_path, reference, signame, target, moment):
    row = chaos.drill(tmp_path, signame, target, moment, reference, timeout=300, window_s=WINDOW_S)
    assert row["signal_delivered"] and row["orphans"] == 0, row
    assert row["resumed"], row["resume_error"]
    assert row["bitwise_equal"], row
    if signame == "SIGKILL":
        assert row["steps_lost"] <= chaos.kill_bound(moment) and row["committed"] >= chaos.EVERY, row
    else:
        assert row["exit_code"] == (130 if signame == "SIGINT" else 143), row
        assert len(row["stderr_lines"]) == 3 and not row["traceback"], row
        assert row["steps_lost"] == 0 and "checkpoint written" in row["stderr_lines"][1], row


END_DRILLS = [("SIGTERM", "rank1", "last-step"), ("SIGINT", "group", "final-save")]


@pytest.mark.parametrize("signame,target,moment", END_DRILLS)
def test_drill_at_the_end(tmp_path, reference_run, signame, target, moment):
    """The chaos drills' checks for a signal at the very end of a 2-rank run: during its last step (a run that
    continues the reference's checkpoint of step STEPS - EVERY, its steps slowed to 1 s, the signal sent once
    step STEPS - 1 is logged) or during the save of its last step (the write widened and marked as the
    async-save drill does). Every rank stops after the last step with that step's checkpoint, exit 130/143 in
    3 lines, not a completed run; the resume then equals the reference."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    (reference_dir, reference), args, env = reference_run, ["train", "--out", str(run), *chaos.RUN_ARGS], {}
    if moment == "last-step":
        # A sleep: the same trajectory, a wide last step. Only the steps after the reference's checkpoint of step
        # STEPS - EVERY are run (continued bitwise, as every drill's resume continues its run), so only they are
        # slowed, not all STEPS (8 s less).
        start = reference_dir / "checkpoints" / f"step_{chaos.STEPS - chaos.EVERY:06d}"
        args += [f"ckpt.resume={start}", "debug.slow_rank=0", "debug.slow_ms=1000"]
    else:
        env = {chaos.DELAY_ENV: f"save@{chaos.STEPS}:{WINDOW_S}:{marker}"}
    proc = chaos.start(args, env)
    try:
        if moment == "last-step":
            assert chaos.wait_until(lambda: chaos.logged_steps(run) >= chaos.STEPS - 1, 240)
        else:
            assert chaos.wait_until(marker.exists, 240)
        assert chaos._send(proc, run, chaos.SIGNALS[signame], target)
        code, _, err = chaos.finish(proc, 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert chaos.wait_until(lambda: not chaos.processes(run), 10)
    lines = [line for line in err.splitlines() if line.startswith("shardlab:")]
    assert code == (130 if signame == "SIGINT" else 143), (code, err[-2000:])
    assert len(lines) == 3 and "Traceback" not in err, err[-2000:]
    assert lines[0] == f"shardlab: interrupted by {signame}: every rank stopped after step {chaos.STEPS}.", lines
    assert "checkpoint written" in lines[1] and chaos.latest_step(run) == chaos.STEPS, lines
    again = chaos.start(["resume", str(run)])
    rcode, _, rerr = chaos.finish(again, 240)
    assert rcode == 0, rerr[-2000:]
    assert chaos.bitwise_equal(chaos.final_params(run), reference)


def test_a_second_signal_during_the_save_aborts_and_keeps_latest(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "marker"
    # The delay widens the saves from step EVERY + 1 on, meant for the signal's save only. Without slow steps
    # the ranks (~10 ms a step) reached the periodic save at 2 x EVERY before the first signal stopped them:
    # its marker was there at once, the second signal followed within a millisecond, and the two SIGTERMs
    # merged into one pending signal (seen). 250 ms steps stop the ranks well before 2 x EVERY, and the
    # marker must be younger than the first signal.
    args = ["train", "--out", str(run), *[a for a in chaos.RUN_ARGS if a != "ckpt.async=true"], "train.steps=40",
            "debug.slow_rank=0", "debug.slow_ms=250"]
    proc = chaos.start(args, {chaos.DELAY_ENV: f"save@{chaos.EVERY + 1}:30:{marker}"})  # only the signal save
    try:
        assert chaos.wait_until(lambda: chaos.logged_steps(run) >= chaos.EVERY + 1, 240)
        first = time.time()
        os.kill(proc.pid, signal.SIGTERM)
        assert chaos.wait_until(marker.exists, 120)  # the ranks stopped and are saving (for 30 s)
        assert marker.stat().st_mtime >= first - 0.05, "the delayed save began before the signal: a periodic one"
        time.sleep(0.2)  # two signals sent together may arrive as one
        os.kill(proc.pid, signal.SIGTERM)
        code, _, err = chaos.finish(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert chaos.wait_until(lambda: not chaos.processes(run), 10)
    lines = [line for line in err.splitlines() if line.startswith("shardlab:")]
    assert code == 143 and len(lines) == 3 and "SIGTERM twice" in lines[0], err[-2000:]
    assert (run / "checkpoints" / "latest").read_text().strip() == f"step_{chaos.EVERY:06d}"
    assert f"latest is step_{chaos.EVERY:06d} (untouched)" in lines[1]
