"""Bad input anywhere: one line on stderr, exit code 2, nothing written (README's promise).

Each listed input has a test; property-based tests (hypothesis) throw random config keys and values,
random TOML files and random CLI arguments at `shardlab train`: every outcome is either exit 2 with one
line and nothing written, or a run config that validates (the launcher is replaced by a stub, so no
process starts). All in-process.
"""
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from shardlab import cli, config
from shardlab.launch import launcher as launch
from shardlab.checkpoint import cli as ckpt_cli
from shardlab.cli import doctor as doctor_cli


def _one_line_exit_2(code, err, out_dir=None):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    if out_dir is not None:
        assert not Path(out_dir).exists()


# --- train: each listed bad value ------------------------------------------------------------------

@pytest.mark.parametrize("override, needle", [
    ("train.global_batch=-2", "train.global_batch=-2"),
    ("parallel.dp_replicate=3", "multiply to dp_replicate=3"),  # world 2, ddp: the degrees must fill it
    ("ckpt.every=-1", "ckpt.every=-1"),
    ("ckpt.keep=-1", "ckpt.keep=-1"),
    ("train.grad_clip=-1", "train.grad_clip=-1"),
    ("train.warmup_steps=-1", "train.warmup_steps=-1"),
    ("train.eval_every=-1", "train.eval_every=-1"),
    ("doctor.hang_timeout_s=-1", "doctor.hang_timeout_s=-1"),
    ("doctor.checksum_every=-1", "doctor.checksum_every=-1"),
    ("model.dropout=5", "model.dropout=5"),
    ("train.beta1=1.5", "train.beta1=1.5"),
    ("train.eval_seqs=0", "train.eval_seqs=0"),
    ("train.lr=nan", "train.lr"),
    ("train.grad_clip=inf", "finite"),
    ("debug.hang_rank=7@1", "debug.hang_rank"),
])
def test_bad_train_value_exits_2_before_launch(tmp_path, capsys, monkeypatch, override, needle):
    launched = []
    monkeypatch.setattr(launch, "launch", lambda *a: launched.append(a) or 0)
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), override])
    err = capsys.readouterr().err
    _one_line_exit_2(code, err, out)
    assert needle in err and not launched


# Tensor parallelism: what the degree must divide (the tensor-parallel docs page). The hidden size cannot be
# indivisible on its own: n_head divides d_model, so a degree dividing n_head divides d_model; an odd
# hidden size is refused by the model's own check, in one line as well.
TINY_CUSTOM = ["model.preset=custom", "model.n_layer=1"]


@pytest.mark.parametrize("args, needle", [
    (["--nproc", "8", "model.preset=tiny", "parallel.tp=8"], "parallel.tp=8 does not divide model.n_head=4"),
    (["--nproc", "4", *TINY_CUSTOM, "model.n_head=6", "model.d_model=48", "parallel.tp=4"],
     "parallel.tp=4 does not divide model.n_head=6"),
    (["--nproc", "4", *TINY_CUSTOM, "model.n_head=4", "model.d_model=66", "parallel.tp=4"],
     "model.n_head=4 does not divide model.d_model=66"),
    (["--nproc", "4", "model.preset=tiny", "parallel.tp=4", "parallel.sp=true", "train.seq_len=34"],
     "train.seq_len=34 is not divisible"),
    (["--nproc", "4", "model.preset=tiny", "parallel.tp=2", "parallel.sp=true", "train.seq_len=31"],
     "train.seq_len=31 is not divisible"),
])
def test_bad_tensor_parallel_layout_exits_2_before_launch(tmp_path, capsys, monkeypatch, args, needle):
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), *args])
    err = capsys.readouterr().err
    _one_line_exit_2(code, err, out)
    assert needle in err


def test_indivisible_hidden_size_is_refused_by_the_tp_check():
    """The TP layer's own check, for a model handed to it directly (the config check comes first)."""
    from shardlab.parallel.tp.own import check_divisible

    with pytest.raises(ValueError, match="parallel.tp=4 does not divide model.d_model=66"):
        check_divisible(4, 66, 4)


def test_resume_with_other_data_exits_2(tmp_path, capsys, monkeypatch, ckpt_run):
    """The resume data check runs: the checkpoint's sample count differs from this run's data split."""
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    code = cli.cmd_train(["--nproc", "1", "--out", str(tmp_path / "r"), *CKPT_BASE, "data.val_fraction=0.1",
                          f"ckpt.resume={ckpt_run}"])
    err = capsys.readouterr().err
    _one_line_exit_2(code, err, tmp_path / "r")
    assert "num_samples" in err


def test_argparse_errors_are_one_line(tmp_path, capsys):
    code = cli.cmd_train(["--nproc", "two", "--out", str(tmp_path / "r")])
    _one_line_exit_2(code, capsys.readouterr().err, tmp_path / "r")


# --- ckpt and doctor on broken files ----------------------------------------------------------------

CKPT_BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
             "train.warmup_steps=1", "train.eval_every=0", "parallel.strategy=single"]


@pytest.fixture(scope="module")
def ckpt_run(tmp_path_factory):
    """A real run of 2 steps with a checkpoint at step 2 (strategy single, in-process)."""
    from shardlab.train.trainer import Trainer

    run = tmp_path_factory.mktemp("run")
    cfg = config.load(None, CKPT_BASE + ["train.steps=2", "ckpt.every=2"])
    cfg = config.validate(cfg, 1)
    Trainer(cfg, run).run()
    return run


def _copy(run, tmp_path) -> Path:
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(run, dst)
    return dst


@pytest.mark.parametrize("content", [b"{}", b"\x00\xff\xfe garbage \x80", b"[1, 2]", b'{"files": {}}',
                                     b'{"files": {"../x": {"size": 1, "sha256": "00"}}}'])
def test_verify_names_a_broken_manifest(ckpt_run, tmp_path, capsys, content):
    """A manifest that is garbage, empty or lists no files is never "ok": CORRUPT, the reason, exit 1
    (verify's exit code for a corrupt checkpoint); inspect and export refuse it with one line, exit 2."""
    run = _copy(ckpt_run, tmp_path)
    step = run / "checkpoints" / "step_000002"
    (step / "MANIFEST.json").write_bytes(content)
    assert ckpt_cli.main(["verify", str(run)]) == 2
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "MANIFEST.json" in out and "ok " not in out
    for args in (["inspect", str(step)], ["export", str(step), "--hf", str(tmp_path / "hf")]):
        code = ckpt_cli.main(args)
        _one_line_exit_2(code, capsys.readouterr().err, tmp_path / "hf")


def test_inspect_without_train_state_is_one_line(ckpt_run, tmp_path, capsys):
    run = _copy(ckpt_run, tmp_path)
    (run / "checkpoints" / "step_000002" / "train_state.json").unlink()
    _one_line_exit_2(ckpt_cli.main(["inspect", str(run)]), capsys.readouterr().err)
    assert ckpt_cli.main(["verify", str(run)]) == 2
    assert "train_state.json: missing" in capsys.readouterr().out


def test_verify_names_a_file_the_manifest_does_not_list(ckpt_run, tmp_path, capsys):
    run = _copy(ckpt_run, tmp_path)
    manifest_path = run / "checkpoints" / "step_000002" / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    shard = next(n for n in manifest["files"] if n.endswith(".distcp"))
    del manifest["files"][shard]
    manifest_path.write_text(json.dumps(manifest))
    assert ckpt_cli.main(["verify", str(run)]) == 2
    assert f"{shard}: not listed in the manifest" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"\x00garbage", b"{}", b"[]", b'{"rank": 0, "records": [1]}',
                                     b'{"rank": "x", "step": 1, "phase": "p", "now_perf": 1, "records": []}',
                                     b'{"rank": 5, "world": 2, "step": 1, "phase": "p", "now_perf": 1, "records": []}'])
def test_doctor_hang_on_a_garbage_flight_record(tmp_path, capsys, content):
    (tmp_path / "doctor").mkdir()
    (tmp_path / "doctor" / "flight_rank0.json").write_bytes(content)
    code = doctor_cli.main(["hang", str(tmp_path)])
    err = capsys.readouterr().err
    _one_line_exit_2(code, err)
    assert "flight_rank0.json is not a flight record" in err
    assert sorted(p.name for p in (tmp_path / "doctor").iterdir()) == ["flight_rank0.json"]  # no report written


# --- property-based: random configs and command lines ---------------------------------------------

KEYS = config.all_keys()
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
VALUES = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.integers(-3, 70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "", "0x10", "1e6", "-0.0", "1.5", "5", "nan", "-inf", "ddp", "zero3",
                     "single", "bf16", "fp16", "tiny", "custom", "latest", "1@2", "0:0:blocks.0", "stdlib"]),
    TEXT,
)
OVERRIDES = st.lists(st.tuples(st.one_of(st.sampled_from(KEYS), TEXT), VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
                     max_size=4)
FLAGS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["--nproc", "--nnodes", "--node-rank", "--master-port", "--max-restarts"]),
              st.one_of(st.integers(-3, 9).map(str), TEXT)),
    st.tuples(st.sampled_from(["--master-addr", "--frob"]), TEXT),
    st.just(("--help-keys",))), max_size=3)
TOML_VALUES = st.one_of(st.integers(-2**65, 2**65), st.floats(), st.booleans(), TEXT, st.lists(st.integers(), max_size=2))
TOML = st.dictionaries(st.one_of(st.sampled_from(["model", "train", "parallel", "ckpt", "doctor", "debug"]), TEXT),
                       st.dictionaries(st.one_of(st.sampled_from([k.split(".", 1)[1] for k in KEYS]), TEXT),
                                       TOML_VALUES, max_size=3), max_size=2)


def _toml(doc: dict) -> str:
    lines = []
    for section, values in doc.items():
        lines.append(f"[{json.dumps(section)}]")
        lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _check_train(argv, capsys, monkeypatch, out):
    """Run `shardlab train ARGV` in-process with the launcher stubbed: exit 2 + one line + nothing
    written, or exit 0 with a config that validates again and survives a TOML round trip."""
    launched = []
    monkeypatch.setattr(launch, "launch", lambda args, cfg, run_dir, main: launched.append((args, cfg)) or 0)
    code = cli.cmd_train(["--out", str(out), *argv])
    captured = capsys.readouterr()
    event(f"exit {code}")
    assert not out.exists()
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1, captured.err
        assert not launched
        return
    assert code == 0
    if not launched:  # --help or --help-keys: printed, nothing else
        assert captured.out and captured.err == ""
        return
    said = captured.err.splitlines()  # the launcher's notes only: its warnings, then the start line
    assert said[-1].startswith("[launch] starting ") and all(ln.startswith("shardlab: warning: ") for ln in said[:-1]), said
    (args, cfg), = launched
    world = args.nproc * args.nnodes
    cfg = config.validate(cfg, world)  # idempotent on a valid config
    assert cfg.train.global_batch == cfg.train.micro_batch * cfg.train.grad_accum * world
    assert config.to_dict(config.load(_write(config.to_toml(cfg)))) == config.to_dict(cfg)


def _write(text: str) -> str:
    fd, path = tempfile.mkstemp(suffix=".toml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(overrides=OVERRIDES, flags=FLAGS)
def test_random_overrides_and_flags(tmp_path, capsys, monkeypatch, overrides, flags):
    argv = [x for flag in flags for x in flag] + ["--nproc", "1", "parallel.strategy=single"] + overrides
    _check_train(argv, capsys, monkeypatch, tmp_path / "run")


@FAST
@given(overrides=OVERRIDES)
@example(overrides=["parallel.ft_store=\x1f"])  # a control character once broke config.toml's round trip
def test_random_overrides_at_world_2(tmp_path, capsys, monkeypatch, overrides):
    _check_train(["--nproc", "2", *overrides], capsys, monkeypatch, tmp_path / "run")


@FAST
@given(doc=TOML, garbage=st.one_of(st.just(""), TEXT))
def test_random_config_files(tmp_path, capsys, monkeypatch, doc, garbage):
    path = _write(_toml(doc) + garbage)
    try:
        _check_train(["--config", path, "--nproc", "1", "parallel.strategy=single"], capsys, monkeypatch,
                     tmp_path / "run")
    finally:
        os.unlink(path)


def test_a_closed_pipe_ends_quietly():
    """`shardlab train --help-keys | head -1`: the reader is gone before the output is written (here: gone
    before the process starts printing, so the write fails every time); no traceback on stderr."""
    import subprocess
    import sys

    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "shardlab", "train", "--help-keys"],
                            stdout=w, stderr=subprocess.PIPE)
    os.close(w)
    os.close(r)  # no reader left: the child's first write gets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_ctrl_c_before_anything_launches_is_one_line_and_130(monkeypatch, capsys):
    """Ctrl-C in a command's own work (a calibration, a plan search, a prepare): no traceback, exit 130."""
    def interrupted(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_main", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.main(["plan", "search"])
    assert e.value.code == 130 and capsys.readouterr().err == "shardlab: interrupted\n"
