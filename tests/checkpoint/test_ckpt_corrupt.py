"""Random corruption of a committed checkpoint (hypothesis): truncate a file, flip a bit, delete a file,
garbage in the manifest, in DCP's .metadata or in train_state.json. Whatever the damage,
`shardlab ckpt verify` says CORRUPT and names what is wrong, `resume=latest` falls back to the previous
good checkpoint, and no command raises a traceback.

One tiny run (strategy single, in-process) is trained once for the module; each example corrupts a
fresh copy of it.
"""
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardlab import config
from shardlab.checkpoint import CheckpointManager
from shardlab.checkpoint import cli as ckpt_cli
from shardlab.checkpoint import manifest as mf

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
        "train.warmup_steps=1", "train.eval_every=0", "parallel.strategy=single", "ckpt.keep=0"]
GOOD, BAD = "step_000002", "step_000004"


def _cfg(extra):
    cfg = config.load(None, BASE + extra)
    cfg = config.validate(cfg, 1)
    return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from shardlab.train.trainer import Trainer

    run = tmp_path_factory.mktemp("run")
    trainer = Trainer(_cfg(["train.steps=4", "ckpt.every=2"]), run)
    trainer.run()
    assert mf.read_latest(run / "checkpoints").name == BAD
    files = sorted(mf.read_manifest(run / "checkpoints" / BAD)["files"])
    return run, trainer, files


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
EDITS = st.sampled_from(["drop_entry", "size", "sha", "phantom", "files_list", "no_files"])
DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 99), st.floats(0, 0.99)),
    st.tuples(st.just("flip"), st.integers(0, 99), st.floats(0, 0.999), st.integers(0, 7)),
    st.tuples(st.just("delete"), st.integers(0, 99)),
    st.tuples(st.just("garbage_file"), st.integers(0, 99), st.binary(max_size=64)),
    st.tuples(st.just("manifest_bytes"), st.binary(max_size=64)),
    st.tuples(st.just("manifest_json"), JSON),
    st.tuples(st.just("manifest_edit"), EDITS, st.integers(0, 99)),
)


def _damage(step: Path, files: list[str], damage) -> str:
    """Apply the damage; returns the name the verification must mention."""
    kind, *args = damage
    if kind in ("truncate", "flip", "delete", "garbage_file"):
        name = files[args[0] % len(files)]
        path = step / name
        data = path.read_bytes()
        if kind == "truncate":
            path.write_bytes(data[:int(len(data) * args[1])])
        elif kind == "flip":
            pos = int(len(data) * args[1])
            path.write_bytes(data[:pos] + bytes([data[pos] ^ (1 << args[2])]) + data[pos + 1:])
        elif kind == "delete":
            path.unlink()
        else:
            assume(args[1] != data)
            path.write_bytes(args[1])
        return name
    manifest_path = step / mf.MANIFEST
    if kind == "manifest_bytes":
        manifest_path.write_bytes(args[0])
    elif kind == "manifest_json":
        manifest_path.write_text(json.dumps(args[0]))
    else:
        manifest = json.loads(manifest_path.read_text())
        edit, i = args
        name = files[i % len(files)]
        entries = manifest["files"]
        if edit == "drop_entry":  # the file is there but no longer listed
            del entries[name]
        elif edit == "size":
            entries[name]["size"] += 1
        elif edit == "sha":
            algo = mf.entry_algo(entries[name])  # a wrong digest of the right form
            entries[name][algo] = "0" * len(entries[name][algo])
        elif edit == "phantom":
            entries["__9_0.distcp"] = {"size": 1, mf.CHECKSUM: "0" * 32}
            name = "__9_0.distcp"
        elif edit == "files_list":
            manifest["files"] = list(entries)
        else:
            manifest["files"] = {}
        manifest_path.write_text(json.dumps(manifest))
        if edit in ("drop_entry", "size", "sha", "phantom"):
            return name
    return mf.MANIFEST


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=DAMAGE)
def test_corruption_is_named_and_resume_falls_back(trained, capsys, damage):
    run0, trainer, files = trained
    work = Path(tempfile.mkdtemp(prefix="ckpt-corrupt-"))
    try:
        run = work / "run"
        shutil.copytree(run0, run)
        named = _damage(run / "checkpoints" / BAD, files, damage)
        capsys.readouterr()

        assert ckpt_cli.main(["verify", str(run)]) == 2
        out = capsys.readouterr().out
        bad_part = out[out.index(f"CORRUPT {run / 'checkpoints' / BAD}"):]
        assert named in bad_part, out
        assert f"ok      {run / 'checkpoints' / GOOD}" in out

        assert ckpt_cli.main(["ls", str(run)]) == 0
        for args in (["inspect", str(run), "--tensors"], ["export", str(run), "--hf", str(work / "hf")]):
            code = ckpt_cli.main(args)
            err = capsys.readouterr().err
            assert code in (0, 2) and len(err.strip().splitlines()) <= 1, err
            if args[0] == "export":  # export verifies first: never from a corrupt checkpoint
                assert code == 2 and not (work / "hf").exists()

        mgr = CheckpointManager(run, _cfg(["ckpt.resume=latest"]))
        assert mgr.resume(trainer.state) == 2
        assert f"{BAD} failed verification" in mgr.notes[0] and f"falling back to {GOOD}" in mgr.notes[0]
        assert named in mgr.notes[0]
    finally:
        shutil.rmtree(work)


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_shard_corrupt_mid_load_older_overwrites_everything_or_the_job_stops(trained):
    """A flipped byte in a shard's tensor data is found while the shard is loaded (after some of its bytes
    reached the state): the older checkpoint then loads over everything, exactly; with no intact older
    one the job stops with one line naming each (exit 2) instead of training on the half-loaded state."""
    import torch
    from shardlab.checkpoint.hf import load_model_tensors
    from shardlab.config import ConfigError

    run0, trainer, _ = trained
    work = Path(tempfile.mkdtemp(prefix="ckpt-midload-"))
    try:
        run = work / "run"
        shutil.copytree(run0, run)
        good = load_model_tensors(run / "checkpoints" / GOOD)
        _flip_middle(run / "checkpoints" / BAD / "__0_0.distcp")
        mgr = CheckpointManager(run, _cfg(["ckpt.resume=latest"]))
        assert mgr.resume(trainer.state) == 2
        assert "xxh3_128 mismatch" in mgr.notes[0] and f"falling back to {GOOD}" in mgr.notes[0]
        live = trainer.state.strategy.full_parameters()
        assert live and all(torch.equal(t, good[n]) for n, t in live.items())
        _flip_middle(run / "checkpoints" / GOOD / "__0_0.distcp")
        with pytest.raises(ConfigError, match="none is intact") as e:
            CheckpointManager(run, _cfg(["ckpt.resume=latest"])).resume(trainer.state)
        assert "\n" not in str(e.value)
        assert f"{BAD} (__0_0.distcp: xxh3_128 mismatch" in str(e.value) and f"{GOOD} (__0_0.distcp" in str(e.value)
    finally:
        shutil.rmtree(work)
