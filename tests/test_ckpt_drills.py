"""Fault drills: a rank failing during save, a corrupted shard, (and kill -9 under elastic restarts)."""
from ckpt_harness import train_run

from shardlab.checkpoint import cli as ckpt_cli

COMMON = ["parallel.strategy=torch-fsdp2", "ckpt.every=2"]


def test_save_failure_on_one_rank_is_abandoned(pool2, tmp_path):
    """Rank 1's write fails at step 4 (async save): no manifest, no .tmp left, step 2 stays latest,
    training goes on and the next checkpoint commits."""
    res = pool2.run(train_run, tmp_path, COMMON + ["train.steps=6", "ckpt.async=true"], 2, fail="1@4")
    saves = {s[0]: s for s in res[0]["saves"]}
    step, outcome, latest, listing = saves[4]
    assert "abandoned" in outcome and "rank(s) [1]" in outcome and "step_000002 stays latest" in outcome
    assert latest == "step_000002" and listing == ["latest", "step_000002"]
    assert res[1]["saves"][1][1] == outcome  # every rank knows the save was abandoned
    assert saves[6][1] is None and saves[6][2] == "step_000006"  # training continued; the next save commits


def test_flipped_byte_verify_names_file_and_resume_falls_back(pool2, tmp_path, capsys):
    pool2.run(train_run, tmp_path, COMMON + ["train.steps=4"], 2)
    shard = tmp_path / "checkpoints" / "step_000004" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    assert ckpt_cli.main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "step_000004/__1_0.distcp: sha256 mismatch" in out and "ok      " in out
    res = pool2.run(train_run, tmp_path, COMMON + ["train.steps=6", "ckpt.resume=latest"], 2)
    assert res[0]["start"] == 2 and res[1]["start"] == 2
    note = res[0]["notes"][0]
    assert "step_000004 failed verification" in note and "__1_0.distcp" in note and "falling back to step_000002" in note
