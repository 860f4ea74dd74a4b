"""The shipped GPU configs (configs/llama3-8b-8gpu.toml, configs/llama3-70b-32gpu.toml) are runnable as
written: the planner says they fit on 80 GB H100s at their world size, and the dry run (every layer built and
one step run on the meta device as rank 0 of that world, NCCL's rules; docs/dry-run.md) passes with the
planner's state bytes exact. No GPU needed; each dry run takes a minute or two on 2 cores."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from cli_harness import run_in_process
from shardlab import config
from shardlab.plan.from_config import from_config
from shardlab.plan.hardware import load_cluster
from shardlab.plan.step import evaluate

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [("llama3-8b-8gpu.toml", 8, "zero3", 1), ("llama3-70b-32gpu.toml", 32, "zero3", 8)]


@pytest.mark.parametrize("name,world,strategy,tp", CONFIGS)
def test_the_planner_says_it_fits(name, world, strategy, tp):
    cfg = config.load(ROOT / "configs" / name)
    cfg = config.validate(cfg, world)
    model, train, lay = from_config(cfg, world)
    assert (lay.strategy, lay.tp, lay.world, train.precision, lay.recompute) == (
        strategy, tp, world, "bf16-autocast", "selective")
    plan = evaluate(model, train, lay, replace(load_cluster("H100-SXM"), num_gpus=world))
    assert plan.fits, (plan.mem_total / 2**30, plan.capacity / 2**30)


# The 70B's 80 layers take ~110 s to build on 2 cores (every layer on the meta device, then its TP and FSDP
# wrapping): its dry run keeps the config's layout, batch and precision with 4 layers (the layers are alike, so
# what the dry run checks, NCCL's rules and the state bytes per rank, is checked the same); the 8B runs whole.
LAYERS = {"llama3-70b-32gpu.toml": ["model.n_layer=4"]}


@pytest.mark.parametrize("name,world,strategy,tp", CONFIGS)
def test_the_dry_run_passes_at_its_world(name, world, strategy, tp):
    # through shardlab's main in this process (as tests/simulate/test_dry_run.py runs its dry runs): the dry run
    # builds on the meta device and starts no process
    r = run_in_process(["train", "--config", str(ROOT / "configs" / name), "--dry-run", "--device", "cuda",
                        "--world", str(world), "--json", *LAYERS.get(name, [])])
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["ok"] and d["world"] == world and d["violations"] == []
    assert d["plan_state_err"] == 0.0  # the planner's params, grads and Adam state per rank: exact
