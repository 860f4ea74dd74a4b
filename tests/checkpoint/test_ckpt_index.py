"""The shard files' index (checkpoint/index.py): written at save, listed in the manifest, read by a load
instead of `.metadata`; a damaged one is named and refused like any file; a checkpoint without one (older,
or its index removed) loads through `.metadata` to the same state. One tiny run (strategy single,
in-process) is trained once for the module; each test works on a fresh copy of it."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from shardlab import config
from shardlab.checkpoint import CheckpointManager
from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint.hf import load_model_tensors
from shardlab.checkpoint.index import Index, index_name

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=4",
        "train.warmup_steps=1", "train.eval_every=0", "parallel.strategy=single", "ckpt.keep=0"]
GOOD, LAST = "step_000002", "step_000004"


def _cfg(extra):
    return config.validate(config.load(None, BASE + extra), 1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from shardlab.train.trainer import Trainer

    run = tmp_path_factory.mktemp("run")
    trainer = Trainer(_cfg(["train.steps=4", "ckpt.every=2"]), run)
    trainer.run()
    return run, trainer


@pytest.fixture
def run(trained, tmp_path):
    shutil.copytree(trained[0], tmp_path / "run")
    return tmp_path / "run"


def _live(trainer) -> dict:
    return {n: t.detach().clone() for n, t in trainer.state.strategy.full_parameters().items()}


def test_the_index_is_listed_and_points_at_every_tensors_bytes(run):
    step = run / "checkpoints" / LAST
    files = mf.read_manifest(step)["files"]
    shards = [n for n in files if n.endswith(".distcp")]
    assert shards and all(index_name(n) in files for n in shards)
    assert mf.verify(step) == []  # hashed into the manifest like every file
    idx = Index.read(step, mf.read_manifest(step))
    saved = load_model_tensors(step)
    assert {f"model.{n}" for n in saved} <= set(idx.tensors)
    for name, t in saved.items():
        shard, at, nbytes, dtype, shape = idx.tensors[f"model.{name}"]
        with open(step / shard, "rb") as f:
            f.seek(at)
            raw = f.read(nbytes)
        assert dtype == t.dtype and shape == tuple(t.shape)
        assert torch.equal(torch.frombuffer(bytearray(raw), dtype=dtype).view(shape), t)
    assert idx.bytes and all(k.startswith("optim.param_groups.") for k in idx.bytes)


def test_a_load_through_the_index_never_unpickles_metadata(run, trained, monkeypatch):
    from torch.distributed.checkpoint import FileSystemReader

    trainer = trained[1]
    want = load_model_tensors(run / "checkpoints" / GOOD)

    def refuse(*_a, **_k):
        raise AssertionError("the load read .metadata")

    monkeypatch.setattr(FileSystemReader, "read_metadata", refuse)
    group = trainer.state.optimizer.param_groups[0]
    eps, group["eps"] = group["eps"], 0.5  # the hyperparameters come from the checkpoint's bytes items
    mgr = CheckpointManager(run, _cfg([]))
    assert mgr.load_first(str(run / "checkpoints" / GOOD), trainer.state)[1] == 2
    assert mgr.load_timing["direct_bytes"] > 0
    live = _live(trainer)
    assert live and all(torch.equal(t, want[n]) for n, t in live.items())
    assert trainer.state.optimizer.param_groups[0]["eps"] == eps


def _drop_index(step: Path) -> None:
    """The checkpoint as written before the index: no index files, none in the manifest."""
    manifest = json.loads((step / mf.MANIFEST).read_text())
    for name in [n for n in manifest["files"] if n.endswith(".index.json")]:
        (step / name).unlink()
        del manifest["files"][name]
    info = {k: v for k, v in manifest.items() if k not in ("files", "total_bytes", "format")}
    mf.write_manifest(step, manifest["files"], **info)


def test_a_checkpoint_without_the_index_loads_the_same_state(run, trained):
    trainer = trained[1]
    mgr = CheckpointManager(run, _cfg([]))
    mgr.load_first(str(run / "checkpoints" / LAST), trainer.state)
    with_index = _live(trainer)
    opt_with = {k: [v.clone() for v in st.values() if torch.is_tensor(v)]
                for k, st in trainer.state.optimizer.state.items()}
    mgr.load_first(str(run / "checkpoints" / GOOD), trainer.state)  # something else in between
    step = run / "checkpoints" / LAST
    _drop_index(step)
    assert mf.verify(step) == [] and Index.read(step, mf.read_manifest(step)) is None
    mgr = CheckpointManager(run, _cfg([]))
    assert mgr.load_first(str(step), trainer.state)[1] == 4
    live = _live(trainer)
    assert all(torch.equal(live[n], with_index[n]) for n in with_index)
    for k, st in trainer.state.optimizer.state.items():
        assert all(torch.equal(a, b) for a, b in zip([v for v in st.values() if torch.is_tensor(v)], opt_with[k]))


def test_a_damaged_index_is_named_and_refused(run, trained):
    from shardlab.checkpoint.resume_path import CheckpointError

    trainer = trained[1]
    path = run / "checkpoints" / LAST / "__0_0.index.json"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    mgr = CheckpointManager(run, _cfg(["ckpt.resume=latest"]))
    assert mgr.resume(trainer.state) == 2  # the next older checkpoint
    assert f"{LAST} failed verification" in mgr.notes[0] and "__0_0.index.json" in mgr.notes[0]
    with pytest.raises(CheckpointError, match=r"__0_0\.index\.json"):
        CheckpointManager(run, _cfg([])).load_first(str(run / "checkpoints" / LAST), trainer.state)
    path.write_bytes(bytes(data[:100]))  # truncated: its size says so before anything is read
    with pytest.raises(CheckpointError, match=r"__0_0\.index\.json: size 100"):
        CheckpointManager(run, _cfg([])).load_first(str(run / "checkpoints" / LAST), trainer.state)


def test_an_index_the_reader_cannot_use_falls_back_to_metadata(run):
    # An entry past its file's end (a well-formed index that does not fit): the index is not used.
    step = run / "checkpoints" / LAST
    manifest = mf.read_manifest(step)
    assert Index.read(step, manifest) is not None
    idx = json.loads((step / "__0_0.index.json").read_text())
    idx["tensors"][0][1] = manifest["files"]["__0_0.distcp"]["size"]
    (step / "__0_0.index.json").write_text(json.dumps(idx))
    assert Index.read(step, manifest) is None
    idx["tensors"][0][1] = "0"
    (step / "__0_0.index.json").write_text(json.dumps(idx))
    assert Index.read(step, manifest) is None
