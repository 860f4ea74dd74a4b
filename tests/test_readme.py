"""The README is executable: every command of its quick start runs here, read from README.md itself (so this
stays true when the README changes), each training command with the tiny preset of its model family and 2 steps.

Processes are shared: a command of N ranks runs what each of its ranks runs (the same CLI entry point with
torchrun's RANK/WORLD_SIZE set) on a pool of N gloo ranks (the session's, tests/conftest.py), a one-process
command runs in this process (the launcher's own one-process path). `runs/x` is a directory of this module,
written first by the quick start's own command that trains into it.
"""
import json
import re
import shlex
from pathlib import Path

import pytest

from cli_harness import as_rank, in_process as _in_process

ROOT = Path(__file__).resolve().parent.parent
POOLS = {2: "pool2", 3: "pool3", 4: "pool4"}


def quick_start() -> list[list[str]]:
    """The commands of the README's quick-start block, one argv each (`shardlab ...` or `torchrun ...`)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^## Quick start\n+```bash\n(.*?)^```", text, re.S | re.M).group(1)
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:  # `a && b` is two commands
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(["shardlab" if w == ".venv/bin/shardlab" else w for w in words[:cut]])
            words = words[cut + 1:]
    return commands


COMMANDS = quick_start()


def _option(cmd: list[str], name: str):
    for i, w in enumerate(cmd):
        if w == name and i + 1 < len(cmd):
            return cmd[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def _trains(cmd: list[str]) -> bool:
    return (cmd[0] == "torchrun" or cmd[1] in ("train", "resume")) and "--help-keys" not in cmd


def _prepared(cmd: list[str], work: Path, index: int) -> list[str]:
    """The argv that runs: `runs/x` in this module's directory, a run directory of its own for each training
    command without --out, and the tiny preset and 2 steps (4 for a resume: past runs/x's 2)."""
    # runs/NAME anywhere in a word (`--out runs/x`, `data.source=tokens:runs/d`) is this module's directory
    argv = [re.sub(r"(^|[=:])runs/", lambda m: m.group(1) + str(work) + "/", w) for w in cmd]
    argv = argv[argv.index("shardlab") + 1:] if argv[0] == "torchrun" else argv[1:]
    if _trains(cmd):
        if argv[0] == "train" and "--out" not in argv:
            argv[1:1] = ["--out", str(work / f"command{index}")]
        preset = "llama-tiny" if any("llama" in w for w in cmd) else "tiny"
        argv += [f"model.preset={preset}", f"train.steps={4 if argv[0] == 'resume' else 2}"]
    return argv


def _world(cmd: list[str]) -> int:
    if cmd[0] == "torchrun":
        return int(_option(cmd, "--nproc-per-node"))
    nproc = _option(cmd, "--nproc")
    if nproc is not None:
        return int(nproc)
    return 1 if "parallel.strategy=single" in cmd or cmd[1] != "train" else 2


def _how(cmd: list[str]) -> str:
    """in-process | pool"""
    if cmd[0] == "torchrun":
        return "pool"  # what torchrun starts on each rank: `python -m shardlab train ...` in its environment
    kind = cmd[1]
    if kind in ("train", "resume", "generate") and "--help-keys" not in cmd:
        world = _world(cmd) if kind != "resume" else 2  # runs/x was saved at 2 ranks
        return "in-process" if world == 1 else "pool"
    if kind in ("train", "plan", "bench", "doctor", "ckpt", "data"):
        return "in-process"
    pytest.fail(f"README quick start: no way to run {' '.join(cmd)!r} here; teach tests/test_readme.py")


def _run(cmd: list[str], argv: list[str], request) -> tuple[int, str, str]:
    if _how(cmd) == "pool":
        results = request.getfixturevalue(POOLS[_world(cmd) if cmd[1] != "resume" else 2]).run(as_rank, argv,
                                                                                                timeout=300)
        code = max((c for c, _, _ in results), key=abs)
        return code, results[0][1], results[0][2]  # rank 0's output
    return _in_process(argv)


@pytest.fixture(scope="module")
def pool3(_shared_pools):
    """The one 3-rank command's pool, one of the session's (tests/conftest.py): at most MAX_RANKS rank
    processes alive with the idle pool2 and pool4 (a pool of its own beside them made 9), stopped at the
    module's end as it was."""
    yield _shared_pools.get(3)
    _shared_pools.release(3)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


@pytest.fixture(scope="module")
def runs_x(work, request):
    """runs/x, trained by the quick start's own command(s) that write it (`--out runs/x`)."""
    writers = [(i, c) for i, c in enumerate(COMMANDS) if _option(c, "--out") == "runs/x"]
    assert writers, "the README's quick start trains no runs/x, but its other commands use it"
    for i, cmd in writers:
        code, _, err = _run(cmd, _prepared(cmd, work, i), request)
        assert code == 0, (cmd, err[-3000:])
    return work / "x"


def test_the_quick_start_is_found():
    kinds = {c[0] if c[0] == "torchrun" else c[1] for c in COMMANDS}
    assert {"train", "resume", "generate", "ckpt", "plan", "torchrun"} <= kinds, kinds
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[" ".join(c[1:])[:70] for c in COMMANDS])
def test_quick_start_command_runs(index, work, runs_x, request):
    cmd = COMMANDS[index]
    if _option(cmd, "--out") == "runs/x":
        return  # the runs_x fixture ran it (and asserted it)
    for name in re.findall(r"tokens:runs/([\w.-]+)", " ".join(cmd)):  # the data it trains on, written first
        writer = next(c for c in COMMANDS if _option(c, "--out") == f"runs/{name}")
        if not (work / name / "meta.json").exists():
            assert _run(writer, _prepared(writer, work, COMMANDS.index(writer)), request)[0] == 0, writer
    code, out, err = _run(cmd, _prepared(cmd, work, index), request)
    assert code == 0, (cmd, out[-2000:], err[-3000:])
    if cmd[1] == "generate":
        assert out.startswith("def main():") and "tokens/s" in err, (out, err)
    if cmd[1:3] == ["data", "prepare"]:
        assert "data.source=tokens:" in out and (work / _option(cmd, "--out")[len("runs/"):] / "meta.json").exists()
    if cmd[1] == "resume":
        assert f"[resume] {runs_x} (step_000002, world size 2)" in err, err[-3000:]
        steps = [json.loads(line)["step"] for line in (runs_x / "metrics.jsonl").read_text().splitlines()]
        assert len(steps) == len(set(steps)) and steps[-1] == 4, steps
    if cmd[1:3] == ["ckpt", "verify"]:
        assert out.startswith("ok ") and "CORRUPT" not in out, out
