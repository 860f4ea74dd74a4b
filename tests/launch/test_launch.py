"""The launcher: `--nproc 2` through torchrun writes a complete run directory; two launcher
processes ("nodes") meet through c10d rendezvous on localhost."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from shardlab.testing import free_port, run_cli

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.steps=6", "train.log_every=2",
        "train.eval_every=3", "train.eval_seqs=8", "train.warmup_steps=1", "ckpt.final=false"]


def test_nproc2_writes_run_directory(tmp_path):
    out = tmp_path / "run"
    res = run_cli(["train", "--nproc", "2", "--out", str(out), "parallel.strategy=torch-ddp", *TINY], timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for key in ("strategy", "world_size", "params", "steps", "tokens_per_step", "tokens_per_s", "step_time_s",
                "final_train_loss", "final_val_loss", "peak_mem_bytes", "state_bytes", "comm", "overlap_pct",
                "exposed_comm_s", "ranks_consistent"):
        assert key in summary, key
    assert summary["world_size"] == 2 and summary["steps"] == 6 and summary["ranks_consistent"] is True
    # the run named (docs/training.md, additions to DESIGN's minimum): layout, whole and per-rank counts, MFU
    assert summary["layout"] == {"dp": "torch-ddp", "pp": 1, "dp_replicate": 2, "dp_shard": 1, "cp": 1, "tp": 1,
                                 "ep": 1, "pp_schedule": None, "sync": "every_step"}
    assert summary["params_per_rank"] == [summary["params_total"]] * 2 == [summary["params"]] * 2
    assert 0 < summary["mfu"] < 1 and summary["peak_flops_per_rank"] > 0 and summary["peak_flops_from"]
    assert len(summary["peak_mem_bytes_per_rank"]) == 2 and max(summary["peak_mem_bytes_per_rank"]) == \
        summary["peak_mem_bytes"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [2, 4, 6]
    assert rows[0] == {"step": 0, "val_loss": rows[0]["val_loss"]} and rows[0]["val_loss"] > 5.0
    assert (out / "config.toml").exists() and (out / "loss.png").stat().st_size > 1000
    assert "step      6/6" in res.stdout and "summary:" in res.stdout
    assert "torch-ddp | dp 2" in res.stdout and "mfu " in res.stdout  # the console's layout and MFU lines


def test_two_nodes_c10d_rendezvous(tmp_path):
    port = free_port()
    out = tmp_path / "run"
    cmds = [[sys.executable, "-m", "shardlab", "train", "--nnodes", "2", "--node-rank", str(r), "--nproc", "1",
             "--master-addr", "127.0.0.1", "--master-port", str(port), "--out", str(out),
             "parallel.strategy=torch-ddp", *TINY] for r in (0, 1)]
    # each launcher in its own session, so that on a timeout its torchrun agent and worker die with it
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for c in cmds]
    deadline = time.monotonic() + 180
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    outputs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outputs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["ranks_consistent"] is True


# --- what the launcher says before the ranks start (shardlab/launch/notes.py) ---------------------------

def test_oversubscription_and_warmup_warnings_come_first_then_the_start_line(tmp_path, capsys, monkeypatch):
    from shardlab import cli
    from shardlab.launch import notes as launch_notes

    monkeypatch.setattr(launch_notes, "cores", lambda: 1)  # 1 rank x 2 threads on "1 core"
    out = tmp_path / "run"
    assert cli.cmd_train(["--nproc", "1", "--out", str(out), *TINY, "parallel.strategy=single", "train.threads=2",
                          "train.steps=1", "train.warmup_steps=5", "train.eval_every=0"]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [ln for ln in err if ln.startswith(("shardlab: warning:", "[launch]"))]
    assert len(said) == 3, err
    assert said[0].startswith("shardlab: warning: 1 ranks x 2 threads on 1 core:") and "2x as slow" in said[0]
    assert said[1].startswith("shardlab: warning: train.warmup_steps=5 is longer than the run (train.steps=1)")
    assert said[2].startswith(f"[launch] starting 1 rank (in this process) -> {out}: global batch 2 sequences x 32 "
                              "tokens, derived from this layout")
    assert (out / "summary.json").is_file()  # and then the run trained


def test_the_start_line_says_when_the_batch_comes_from_the_layout():
    from shardlab import config
    from shardlab.launch.notes import oversubscribed, start_line

    cfg = config.load(None, ["train.micro_batch=4", "train.global_batch=0"])
    cfg = config.validate(cfg, 3)
    line = start_line(cfg, 3, 1, "runs/x", derived_batch=True)
    assert "global batch 12 sequences x 128 tokens, derived from this layout" in line
    assert "micro_batch 4 x grad_accum 1 x 3 data-parallel ranks" in line and "set train.global_batch" in line
    cfg = config.load(None, ["train.micro_batch=4", "train.global_batch=16"])
    cfg = config.validate(cfg, 2)
    assert start_line(cfg, 2, 1, "runs/x", derived_batch=False).endswith(
        "global batch 16 sequences x 128 tokens (train.global_batch) = micro_batch 4 x grad_accum 2 x 2 "
        "data-parallel ranks")
    assert oversubscribed(2, 1, 2) is None and "32x as slow" in oversubscribed(64, 1, 2)


def test_every_shipped_config_sets_the_global_batch_and_a_layout_that_cannot_divide_it_is_refused(tmp_path, capsys,
                                                                                                    monkeypatch):
    import tomllib
    from pathlib import Path

    from shardlab import cli

    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "configs").glob("*.toml")):
        assert tomllib.loads(path.read_text())["train"].get("global_batch", 0) > 0, path
    monkeypatch.chdir(root)
    out = tmp_path / "run"
    assert cli.cmd_train(["--config", "configs/tiny.toml", "--nproc", "3", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "train.global_batch=32 is not divisible by world size x micro batch = 3 x 4 = 12" in line
    assert not out.exists()


def test_pool_ranks_die_with_their_owner(tmp_path):
    """A WorkerPool's ranks exit when the process that owns the pool is SIGKILLed (a killed pytest or bench
    leaves no rank behind): the parent-death signal, not a cleanup the killed owner cannot run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "owner.py"
    script.write_text("import os, sys, time\n"
                      "from shardlab.launch.workers import WorkerPool\n"
                      "if __name__ == '__main__':\n"
                      "    pool = WorkerPool(2)\n"
                      "    pool.run(os.getpid)\n"
                      "    print(' '.join(str(p.pid) for p in pool.procs), flush=True)\n"
                      "    time.sleep(120)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=30)
        deadline = time.monotonic() + 20
        alive = pids
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in pids if _alive(p)]
        assert not alive, f"pool ranks {alive} outlived their owner"
    finally:
        owner.kill()


def _leave_a_watchdog(run_dir):
    """What a trainer built and never closed does: its hang watchdog keeps running after the function returns."""
    from pathlib import Path

    from shardlab import comm
    from shardlab.doctor.watchdog import Watchdog

    Watchdog(Path(run_dir), comm.rank(), comm.world_size(), timeout_s=0.3)
    return os.getpid()


def test_a_watchdog_left_running_does_not_end_an_idle_pool_rank(pool2, tmp_path):
    """The session's pools outlive the functions they run: a watchdog a function left behind is stopped when it
    returns, so the idle rank is not ended `doctor.hang_timeout_s` later (the ranks would exit with code 3)."""
    pids = pool2.run(_leave_a_watchdog, tmp_path)
    time.sleep(1.5)  # five times the watchdog's timeout, idle
    assert pool2.dead() == {}
    assert pool2.run(os.getpid) == pids
    assert not (tmp_path / "doctor").exists()  # no flight record: the watchdog never fired


def test_a_pool_rank_that_died_idle_is_replaced_with_one_line(pool2, capsys):
    pool2.run(os.getpid)  # started (and alive)
    killed = pool2.procs[1].pid
    os.kill(killed, signal.SIGKILL)
    pool2.procs[1].join(timeout=10)
    pids = pool2.run(os.getpid)
    assert len(pids) == 2 and killed not in pids
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "ended while idle" in lines[0] and "-9" in lines[0], lines


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (dead) parent's reaper is gone for our purpose
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False


def test_the_launcher_of_a_multi_rank_run_does_not_load_torch(tmp_path):
    """The launcher validates the config, checks the data and the resume target, and starts torchrun: none of
    it needs torch, whose import costs seconds on every launch (and `--help` and bad input answer at once)."""
    probe = textwrap.dedent(f"""
        import sys
        from shardlab.launch import launcher
        seen = {{}}
        def agent(cmd, env):  # where torchrun would start: record, and stop there
            seen["torch"] = "torch" in sys.modules
            raise SystemExit(0)
        launcher._run_agent = agent
        from shardlab.cli import main
        try:
            main(["train", "--out", {str(tmp_path / "run")!r}, "--nproc", "2", "model.preset=tiny",
                  "train.steps=2", "train.seq_len=32", "train.warmup_steps=1", "debug.hang_rank=1@9"])
        except SystemExit:
            pass
        print("torch loaded:", seen.get("torch"))
        """)
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "torch loaded: False" in res.stdout, res.stdout + res.stderr[-3000:]
    for argv in (["--help"], ["train", "model.preset=nope"]):
        code = f"import sys; from shardlab.cli import main\ntry: main({argv!r})\nexcept SystemExit: pass\n" \
               "print('torch loaded:', 'torch' in sys.modules)"
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert "torch loaded: False" in res.stdout, (argv, res.stdout, res.stderr[-2000:])
