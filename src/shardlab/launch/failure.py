"""Why a run failed, said once, last: shardlab's verdict after a multi-rank run ends badly.

Each rank that stops on an error writes `RUN/failures/rank{R}.json` (what kind, which rank(s) the doctor
blames, the report to read); torchrun's agent writes the exit code or signal of every failed rank (see
`shardlab.launch.agent`). The launcher combines both into the last lines on stderr and the exit code:

    code  kind         what happened
    0     -            the run finished
    1     crash        a rank raised an unexpected error or was killed (signal, out of memory)
    2     bad input    config, data or checkpoint problem (damaged input too), found before launching or
                       by the ranks before training
    3     hang         the hang watchdog stopped a rank that made no progress (doctor.hang_timeout_s)
    4     anomaly      the doctor stopped the run: non-finite loss/gradient, loss spike, replicas diverged
    5     distributed  the ranks disagreed: uneven inputs (data.uneven=error) or a collective mismatch
    130   interrupted  SIGINT (Ctrl-C): the ranks stopped at a step boundary and saved (ckpt.on_signal)
    143   interrupted  SIGTERM (a scheduler's preemption): the same

The ranks exit with the same codes (a one-process run too), so a script can tell them apart.
"""
from __future__ import annotations

import json
import os
import signal
import time
import traceback
from pathlib import Path

CODES = {"crash": 1, "bad input": 2, "hang": 3, "anomaly": 4, "distributed": 5}
_TERM = 128 + signal.SIGTERM  # a rank the launcher stopped after another failed: a bystander

# What a collective raises on a rank whose peer died (gloo's TCP pair, NCCL's abort): an echo of another rank's
# failure, not a failure of its own. Such a rank's traceback goes to its record, not to the terminal (one line
# of the verdict names these ranks), so the rank that failed first, and why, is what the terminal shows.
ECHOES = ("Connection closed by peer", "Connection reset by peer", "NCCL communicator was aborted",
          "remote process exited or there was a network error")
_recorded: set[int] = set()  # id() of the exceptions record() wrote down, as an echo, in this process


def is_echo(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in ECHOES)


def quiet_echoes() -> None:
    """On a rank started by shardlab's launcher: an echo that record() wrote down ends the rank without its
    traceback on the terminal (its record keeps it; the launcher's verdict says it in one line). Anything else,
    an echo not recorded included, is printed as Python prints it. Installed before the process group, whose
    excepthook (the `[rankN]:` prefix) wraps this one."""
    import sys

    previous = sys.excepthook

    def hook(kind, exc, tb):
        if id(exc) in _recorded:
            return
        previous(kind, exc, tb)

    sys.excepthook = hook


def record(run_dir: Path, rank: int, kind: str, exc: BaseException, doctor=None) -> None:
    """On a rank, as it stops: what went wrong here, for the launcher's verdict."""
    entry = {"rank": rank, "kind": kind, "time": time.time(), "error": f"{type(exc).__name__}: {exc}"}
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if frames:
        f = frames[-1]
        entry["where"] = f"{f.filename}:{f.lineno} in {f.name}"
    if kind == "crash" and is_echo(exc):  # kept here, as it is not printed (quiet_echoes)
        entry.update(echo=True, traceback="".join(traceback.format_exception(exc)))
    report = getattr(doctor, "last_report", None) if doctor is not None else None
    checksum = getattr(doctor, "last_checksum", None) if doctor is not None else None
    if kind == "anomaly" and report and report.get("summary") == str(exc):
        entry.update(step=report["step"], ranks=report["ranks"], reason=report["reason"],
                     report=str(Path(run_dir) / "anomalies" / f"step_{report['step']}.json"))
        loc = (report.get("per_rank", {}).get(str(report["ranks"][0]), {}) or {}).get("localisation") \
            if report["ranks"] else None
        if loc and loc.get("module"):
            stage = f" (pipeline stage {loc['stage']}, on rank {loc['stage_rank']})" if "stage" in loc else ""
            entry["module"] = f"the {loc['where']} of module {loc['module']}{stage}"
    elif kind == "anomaly" and checksum and not checksum.get("consistent", True):
        first = checksum.get("first") or {}
        entry.update(step=checksum["step"], ranks=first.get("ranks", []),
                     reason=f"replicas diverged (first parameter {first.get('param')})",
                     report=str(Path(run_dir) / "doctor" / f"divergence_step_{checksum['step']}.json"))
    try:
        out = Path(run_dir) / "failures"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{rank}.json").write_text(json.dumps(entry, indent=1, default=str))
        if entry.get("echo"):
            _recorded.add(id(exc))
    except OSError:
        pass  # the verdict falls back on exit codes (and the traceback is printed)


def record_interrupted(run_dir: Path, stop) -> None:
    """On rank 0, after every rank stopped for a signal (shardlab.launch.interrupt.Interrupted): what was saved."""
    from shardlab.launch.interrupt import name

    entry = {"rank": 0, "kind": "interrupted", "time": time.time(), "signal": name(stop.signum),
             "step": stop.step, "checkpoint": str(stop.checkpoint) if stop.checkpoint else None,
             "save_s": round(stop.save_s, 3), "note": stop.note}
    out = Path(run_dir) / "failures"
    out.mkdir(parents=True, exist_ok=True)
    (out / "rank0.json").write_text(json.dumps(entry, indent=1))


def interrupted(run_dir: Path, signum: int | None = None, aborted: bool = False) -> tuple[list[str], int] | None:
    """The last lines (at most 3) and exit code of a job that a signal ended; None when none did.
    `signum`: the signal the launcher itself received (None: it got none, a rank may have)."""
    from shardlab.checkpoint import manifest as mf
    from shardlab.launch.interrupt import exit_code, name

    run_dir = Path(run_dir)
    records, _ = _load(run_dir, run_dir / "failures" / "-")
    rec = records.get(0) if records.get(0, {}).get("kind") == "interrupted" else None
    if rec is None and signum is None:
        return None
    sig = name(signum) if signum is not None else rec["signal"]
    latest = mf.read_latest(run_dir / "checkpoints")
    kept = f"latest is {latest.name}" if latest is not None else "there is no checkpoint yet"
    if aborted:
        what, saved = f"{sig} twice: stopped at once, the save abandoned", f"{kept} (untouched)"
    elif rec is None:
        what = f"{sig}: the ranks ended before they had stopped and saved (still starting, or past ckpt.signal_grace_s)"
        saved = f"no checkpoint written; {kept}"
    else:
        what = f"{sig}: every rank stopped after step {rec['step']}"
        if rec.get("checkpoint"):
            saved = f"checkpoint written: {rec['checkpoint']} ({rec['save_s']:.2f} s)"
        elif rec.get("note") == "ckpt.on_signal=false":
            saved = f"no checkpoint written (ckpt.on_signal=false); {kept}"
        else:
            saved = f"no checkpoint written ({rec.get('note') or 'nothing trained yet'}); {kept}"
    again = (f"resume: shardlab resume {run_dir}" if mf.read_latest(run_dir / "checkpoints") is not None
             else f"nothing to resume: start again with shardlab train --out {run_dir}")
    lines = [f"shardlab: interrupted by {what}.", f"shardlab: {saved}.", f"shardlab: {again}"]
    return lines, exit_code(signum if signum is not None else signal.Signals[sig])


def clear(run_dir: Path, agent_file: Path) -> None:
    """Before a launch: records of an earlier attempt in this directory are not about this one."""
    for p in (Path(run_dir) / "failures").glob("rank*.json"):
        p.unlink(missing_ok=True)
    Path(agent_file).unlink(missing_ok=True)
    tidy(run_dir)


def tidy(run_dir: Path, log: Path | None = None) -> None:
    """Remove an empty `failures/` and an empty launcher log: a run leaves them only with something in them."""
    if log is not None and Path(log).is_file() and Path(log).stat().st_size == 0:
        Path(log).unlink(missing_ok=True)
    try:
        (Path(run_dir) / "failures").rmdir()  # only when empty
    except OSError:
        pass


def _load(run_dir: Path, agent_file: Path) -> tuple[dict[int, dict], dict]:
    records = {}
    for p in (Path(run_dir) / "failures").glob("rank*.json"):
        try:
            r = json.loads(p.read_text())
            records[int(r["rank"])] = r
        except (OSError, ValueError, KeyError):
            continue
    try:
        agent = json.loads(Path(agent_file).read_text())
    except (OSError, ValueError):
        agent = {}
    return records, agent


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}"


def verdict(run_dir: Path, returncode: int, log: Path | None = None,
            agent_file: Path | None = None) -> tuple[list[str], int]:
    """The launcher's last lines and exit code for a job that ended with `returncode` != 0."""
    run_dir = Path(run_dir)
    records, agent = _load(run_dir, agent_file or run_dir / "failures" / "launcher.json")
    if (lost := _node_verdict(returncode, agent)) is not None:  # before the records: other nodes' are there too
        return lost
    exits = {int(r): f for r, f in agent.get("failures", {}).items()}
    said = log is not None and Path(log).is_file() and Path(log).stat().st_size > 0
    tail = [f"launcher messages (torchrun): {log}"] if said else []

    anomaly = [r for r in records.values() if r["kind"] == "anomaly"]
    if anomaly:
        r = next((a for a in anomaly if a.get("ranks") is not None), anomaly[0])
        who = _ranks(r["ranks"]) if r.get("ranks") else "the run"
        what = r.get("reason") or r["error"]
        where = f", first in {r['module']}" if r.get("module") else ""
        step = f" at step {r['step']}" if r.get("step") is not None and r.get("step") >= 0 else ""
        lines = [f"FAILED (anomaly, {who}{step}): {what}{where}; the run stopped (doctor.on_anomaly=stop)."]
        if r.get("report"):
            lines.append(f"report: {r['report']}"
                         + (f"; replay: shardlab doctor replay {run_dir} --step {r['step']}"
                            if "anomalies" in r["report"] else ""))
        return _out(lines + tail, "anomaly")

    bad = [r for r in records.values() if r["kind"] == "bad input"]
    if bad:  # the ranks refused to train (e.g. no intact checkpoint): the first one's line, without its class
        r = min(bad, key=lambda r: r["time"])
        return _out([f"FAILED (bad input): {r['error'].partition(': ')[2] or r['error']}"] + tail, "bad input")

    hung = sorted(rank for rank, f in exits.items() if f.get("exitcode") == CODES["hang"])
    if hung:
        first = ""
        try:
            from shardlab.doctor.hang import report
            first = report(run_dir)["lines"][0]
        except Exception:  # noqa: BLE001 - the verdict must not fail; the hint below still holds
            pass
        lines = [f"FAILED: hang: the watchdog stopped {_ranks(hung)} after doctor.hang_timeout_s without progress"
                 + (f"; {first}" if first else "") + ".",
                 f"flight records: {run_dir}/doctor/flight_rank*.json; line them up: shardlab doctor hang {run_dir}"]
        return _out(lines + tail, "hang")

    distributed = [r for r in records.values() if r["kind"] == "distributed"]
    if distributed:
        r = min(distributed, key=lambda r: r["time"])
        first = r["error"].split(". ")[0].rstrip(".")  # the full message is printed above
        return _out([f"FAILED: the ranks disagreed ({_ranks(x['rank'] for x in distributed)} stopped): {first}."]
                    + tail, "distributed")

    echoes = sorted(rank for rank, r in records.items() if r.get("echo"))
    echo = [_echo_line(run_dir, records, echoes)] if echoes else []
    killed = sorted((rank, f) for rank, f in exits.items() if f.get("signal") and f["signal"] != "SIGTERM")
    if killed:
        rank, f = killed[0]
        hint = " (often the kernel's out-of-memory killer; see dmesg)" if f["signal"] == "SIGKILL" else ""
        return _out(echo + [f"FAILED: rank {rank} was killed by {f['signal']}{hint}; the other ranks were stopped."]
                    + tail, "crash")

    crashed = [r for r in records.values() if r["kind"] == "crash" and not r.get("echo")]
    if crashed:
        r = min(crashed, key=lambda r: r["time"])  # the first error; later ones are usually its echoes
        where = f" at {r['where']}" if r.get("where") else ""
        return _out(echo + [f"FAILED: rank {r['rank']} raised {r['error']}{where} (its traceback is above)."]
                    + tail, "crash")

    own = sorted((rank, f) for rank, f in exits.items()
                 if f.get("exitcode") not in (None, _TERM) and rank not in echoes)
    if own:
        rank, f = own[0]
        what = f"exited with code {f['exitcode']}" if f["exitcode"] >= 0 else f"was killed by {f['signal']}"
        return _out(echo + [f"FAILED: rank {rank} {what} (its output is above)."] + tail, "crash")
    if echoes:  # every failed rank lost a peer: the network, or a rank that died saying nothing
        r = min((records[rank] for rank in echoes), key=lambda r: r["time"])
        return _out([f"FAILED: rank {r['rank']} lost its connection to a peer first: {_short(r['error'])} (no rank "
                     f"reported an error of its own; the ranks' tracebacks: {run_dir}/failures/rank*.json)."]
                    + tail, "crash")
    if agent.get("agent_error"):
        return _out([f"FAILED: the launcher stopped: {agent['agent_error']}."] + tail, "crash")
    return _out([f"FAILED: the job ended with exit code {returncode}."] + tail, "crash")


def _node_verdict(returncode: int, agent: dict) -> tuple[list[str], int] | None:
    """One line when this node's agent itself ended (docs/cluster.md, "A node lost mid-run"): it was killed
    (its ranks die with it), or its rendezvous timed out because not every node joined (a node never started,
    or died and was not started again). The run directory's records may be another node's: not read here."""
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        return [f"shardlab: FAILED: this node's torchrun agent was killed by {name}, its ranks with it; the "
                "other nodes restart or stop (--max-restarts); start this node again with the same command to "
                "rejoin (exit code 1)"], CODES["crash"]
    if str(agent.get("agent_error", "")).startswith("RendezvousTimeoutError"):
        waited = os.environ.get("SHARDLAB_RDZV_JOIN_TIMEOUT") or "600"
        return [f"shardlab: FAILED: not every node joined the rendezvous within {waited} s (--timeout): a node was "
                "not started, or died and was not started again; the checkpoints written so far are kept, "
                "ckpt.resume=latest continues from the latest (exit code 1)"], CODES["crash"]
    return None


def _short(error: str) -> str:
    """`RuntimeError: [.../pair.cc:553] Connection closed by peer [127.0.0.1]:13724. This is ...` -> its marker."""
    marker = next((m for m in ECHOES if m in error), None)
    return f"{error.partition(':')[0]}: {marker}" if marker else error.split(". ")[0]


def _echo_line(run_dir: Path, records: dict, echoes: list[int]) -> str:
    """One line for the ranks whose collectives failed because a peer died (their tracebacks are not printed)."""
    first = records[echoes[0]]["error"]
    files = f"{run_dir}/failures/rank{echoes[0]}.json" if len(echoes) == 1 else f"{run_dir}/failures/rank*.json"
    return (f"{_ranks(echoes)} stopped when a peer died ({_short(first)}): an echo of the failure below; "
            f"traceback{'s' if len(echoes) > 1 else ''} in {files}")


def _out(lines: list[str], kind: str) -> tuple[list[str], int]:
    code = CODES[kind]
    return [f"shardlab: {line}" for line in lines] + [f"shardlab: exit code {code} ({kind})"], code
