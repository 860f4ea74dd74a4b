"""A launch this host cannot hold is refused before any rank starts (shardlab/launch/fit.py): one line, exit 2,
nothing started or written. The refusals are tested without ever starting the ranks they refuse."""
import pytest

from shardlab.launch import fit

GiB, MiB = 2**30, 2**20


def test_cores_beyond_the_factor_need_oversubscribe():
    assert fit.OVERSUBSCRIBE_FACTOR == 4  # docs/training.md states it
    assert fit.cores_refusal(8, 1, 2, oversubscribe=False) is None  # 4x: slow, allowed (a warning only)
    line = fit.cores_refusal(9, 1, 2, oversubscribe=False)
    assert line.startswith("--nproc 9: 9 ranks on 2 cores is more than 4x the cores") and "--nproc 8 or fewer" in line
    assert "--oversubscribe" in line
    assert fit.cores_refusal(64, 1, 2, oversubscribe=True) is None
    # threads count: 3 ranks x 4 threads = 12 threads on 2 cores is past 4x; 2 of them fit
    line = fit.cores_refusal(3, 4, 2, oversubscribe=False)
    assert "3 ranks x train.threads=4 = 12 threads on 2 cores" in line and "--nproc 2 or fewer" in line


def test_memory_is_the_planner_estimate_plus_the_floor_per_rank_against_available():
    floor = fit.RANK_FLOOR_BYTES
    # 10 ranks of (100 MiB planned + the floor) fit exactly in 10 x that, and not in a byte less
    need = 10 * (100 * MiB + floor)
    assert fit.memory_refusal(10, 100 * MiB, need) is None
    line = fit.memory_refusal(10, 100 * MiB, need - 1)
    per = (100 * MiB + floor) / MiB
    assert line.startswith(f"--nproc 10 does not fit this machine's memory: each rank needs about {per:.0f} MiB "
                           f"(the planner's 100 MiB for this model, layout and batch + {floor / MiB:.0f} MiB")
    assert f"x 10 ranks = {need / GiB:.1f} GiB" in line and "is available (MemAvailable)" in line
    assert "use --nproc 9 or fewer" in line and "--oversubscribe does not lift this" in line
    # with GPUs the model's memory is not on the host: the floor alone
    assert fit.memory_refusal(4, 0.0, 4 * floor, gpu=True) is None
    assert "its model's memory is on the GPU" in fit.memory_refusal(4, 0.0, 3 * floor, gpu=True)
    assert "not even one rank fits" in fit.memory_refusal(1, 0.0, floor / 2)


def test_the_suggested_count_passes_both_checks():
    # memory alone would allow 20 ranks, the cores (2, without --oversubscribe) 8: the line suggests 8, so that
    # following it is not refused by the next check; with --oversubscribe (most=None) the memory's 20
    floor = fit.RANK_FLOOR_BYTES
    most = fit.cores_fit(1, 2)
    assert most == 8 and fit.cores_fit(4, 2) == 2 and fit.cores_fit(16, 2) == 1
    line = fit.memory_refusal(64, 0.0, 20.5 * floor, most=most)
    assert "use --nproc 8 or fewer" in line
    assert fit.cores_refusal(8, 1, 2, oversubscribe=False) is None and fit.memory_refusal(8, 0.0, 20.5 * floor) is None
    assert "use --nproc 20 or fewer" in fit.memory_refusal(64, 0.0, 20.5 * floor, most=None)


def test_the_planned_bytes_are_the_planner_memory_lines_of_the_run():
    from shardlab import config
    from shardlab.plan.from_config import from_config
    from shardlab.plan.layout import grad_accum
    from shardlab.plan.memory import memory_lines

    cfg = config.load(None, ["model.preset=small", "train.micro_batch=8", "train.global_batch=16"])
    cfg = config.validate(cfg, 2)
    model, train, lay = from_config(cfg, 2)
    expected = sum(ln.bytes for ln in memory_lines(model, train, lay, grad_accum(train, lay)))
    assert fit.planned_bytes(cfg, 2) == (expected, "") and expected > 100 * MiB  # (171 MiB: the measured 540 MiB
    # peak RSS of such a rank is below it plus the 400 MiB floor, see fit.py)
    # on a CPU, parameters "offloaded to the host" stay in this memory: counted as if not offloaded
    zero3 = ["model.preset=small", "train.micro_batch=8", "train.global_batch=16", "parallel.strategy=zero3"]
    cfg, offloaded = (config.load(None, zero3 + extra) for extra in
                      ([], ["parallel.offload=params", "parallel.offload_to=host"]))
    cfg, offloaded = (config.validate(c, 2) for c in (cfg, offloaded))
    assert fit.planned_bytes(offloaded, 2) == fit.planned_bytes(cfg, 2)


def test_nproc_64_is_refused_before_anything_starts_or_is_written(tmp_path, capsys, monkeypatch):
    """The issue's `--nproc 64` on a small machine: refused in one line with the numbers, exit 2; the launcher never
    reaches torchrun (no rank starts) and no run directory is created. Memory as this machine has it (23 GiB:
    64 x ~408 MiB does not fit) and as a bigger one would (then the cores refuse it)."""
    from shardlab import cli
    from shardlab.launch import launcher, notes

    def never(*a, **k):
        raise AssertionError("a rank was started")

    monkeypatch.setattr(launcher, "_run_agent", never)
    monkeypatch.setattr(notes, "cores", lambda: 2)
    out = tmp_path / "run"
    argv = ["--nproc", "64", "--out", str(out), "model.preset=tiny", "train.steps=2", "train.seq_len=32",
            "train.warmup_steps=1"]
    monkeypatch.setattr(fit, "mem_available", lambda: 23 * GiB)
    monkeypatch.setattr(fit, "has_gpus", lambda: False)
    assert cli.cmd_train(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("shardlab: error: --nproc 64 does not fit this machine's memory: each rank needs about ")
    assert "x 64 ranks = " in line and "but 23.0 GiB is available" in line and "use --nproc " in line
    assert not out.exists()

    monkeypatch.setattr(fit, "mem_available", lambda: 1024 * GiB)
    assert cli.cmd_train(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("shardlab: error: --nproc 64: 64 ranks on 2 cores is more than 4x the cores (each step about 32x "
                    "as slow as with a core per rank): use --nproc 8 or fewer, or add --oversubscribe to run them "
                    "anyway")
    assert not out.exists()
    # --oversubscribe lifts the cores' rule (and the launch goes ahead: here, into the stub)
    with pytest.raises(AssertionError, match="a rank was started"):
        cli.cmd_train(["--oversubscribe", *argv])


def test_nproc_64_from_the_command_line_exits_2_at_once(tmp_path):
    """The same through `python -m shardlab`, on this machine as it is: no torchrun, no rank, one line, exit 2 (skipped
    on a machine with 16+ cores and the memory for 64 tiny ranks, where 64 are allowed)."""
    import os

    from shardlab.testing import run_cli

    ncores = len(os.sched_getaffinity(0))
    fits_memory = (fit.mem_available() or 0) > 64 * (fit.RANK_FLOOR_BYTES + 8 * MiB)
    if ncores * fit.OVERSUBSCRIBE_FACTOR >= 64 and fits_memory:
        pytest.skip(f"{ncores} cores and enough memory: 64 ranks would be allowed here")
    out = tmp_path / "run"
    res = run_cli(["train", "--nproc", "64", "--out", str(out), "model.preset=tiny", "train.steps=2",
                   "train.seq_len=32", "train.warmup_steps=1"], timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("shardlab: error: --nproc 64") and res.stdout == ""
    assert not out.exists()


def test_a_typo_sized_model_is_refused_by_its_weights_before_the_planner_walks_it(monkeypatch, tmp_path, capsys):
    """model.n_layer=100000000 (a typo: 10^8 blocks): the planner's memory lines walk every parameter's shape, which
    took minutes and grew until the kernel killed the launcher (a property test's random override did so in the
    suite). Its 16-bit weights alone, fully sharded, exceed the host: refused on that closed-form count, in one
    line, without the walk."""
    from shardlab import cli, config
    from shardlab.launch import launcher
    from shardlab.plan import memory
    from shardlab.plan.from_config import from_config

    monkeypatch.setattr(memory, "memory_lines", lambda *a, **k: pytest.fail("the planner walked the model"))
    cfg = config.validate(config.load(None, ["model.n_layer=100000000", "parallel.strategy=ddp"]), 2)
    planned, note = fit.planned_bytes(cfg, 2, available=23 * GiB)
    assert planned == 2.0 * from_config(cfg, 2)[0].params / 2 > 23 * GiB and "weights alone" in note

    monkeypatch.setattr(launcher, "_run_agent", lambda *a, **k: pytest.fail("a rank was started"))
    monkeypatch.setattr(fit, "mem_available", lambda: 23 * GiB)
    monkeypatch.setattr(fit, "has_gpus", lambda: False)
    out = tmp_path / "run"
    assert cli.cmd_train(["--nproc", "2", "--out", str(out), "model.n_layer=100000000"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "does not fit this machine's memory" in line and "16-bit weights alone" in line, line
    assert "not even one rank fits" in line and not out.exists()


def test_the_memory_check_lists_one_block_of_each_kind_however_many_blocks(monkeypatch):
    """Two typos at once (model.d_model=8, model.n_layer=10^6): the 16-bit weights fit, so the planner's memory
    lines run; they list one block of each kind (every block of a kind holds the same parameters), not 10^6
    blocks' parameters (a walk that grew without bound before). The figure is the planner's, and it refuses."""
    from shardlab import config
    from shardlab.plan.from_config import from_config
    from shardlab.plan.model import ModelSpec

    listed = []
    real = ModelSpec._param_shapes

    def spy(self, blocks=None):
        listed.append(None if blocks is None else len(blocks))
        return real(self, blocks)
    monkeypatch.setattr(ModelSpec, "_param_shapes", spy)
    cfg = config.validate(config.load(None, ["model.d_model=8", "model.n_head=1", "model.n_layer=1000000",
                                             "parallel.strategy=ddp"]), 2)
    planned, note = fit.planned_bytes(cfg, 2, available=23 * GiB)
    assert listed and all(n is not None and n <= 2 for n in listed), listed
    weights = 2.0 * from_config(cfg, 2)[0].params / 2  # 0.8 GiB: the floor lets it through to the planner
    assert note == "" and planned > 23 * GiB > weights  # the planner's figure: ~500 GiB a rank
    assert fit.memory_refusal(2, planned, 23 * GiB) is not None


def test_a_model_too_large_to_size_is_refused_not_let_through(monkeypatch, capsys, tmp_path):
    """Where the planner's memory lines themselves run out of memory (MemoryError), the run is refused as larger
    than the host, not launched on the floor alone (as a run the planner has no model of is)."""
    from shardlab import cli, config
    from shardlab.launch import launcher
    from shardlab.plan import memory

    def exhausted(*a, **k):
        raise MemoryError
    monkeypatch.setattr(memory, "memory_lines", exhausted)
    cfg = config.validate(config.load(None, ["parallel.strategy=ddp"]), 2)
    planned, note = fit.planned_bytes(cfg, 2, available=23 * GiB)
    assert planned == 23 * GiB and "ran out of memory" in note
    monkeypatch.setattr(launcher, "_run_agent", lambda *a, **k: pytest.fail("a rank was started"))
    monkeypatch.setattr(fit, "mem_available", lambda: 23 * GiB)
    monkeypatch.setattr(fit, "has_gpus", lambda: False)
    out = tmp_path / "run"
    assert cli.cmd_train(["--nproc", "2", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "ran out of memory sizing it" in line and "not even one rank fits" in line and not out.exists(), line
