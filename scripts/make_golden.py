"""Write the golden checkpoints that tests/test_golden_ckpt.py loads: one small checkpoint per layout (ddp,
tp=2, pp=2 at world 2; a 2-layer, 32-wide tiny GPT), written by the code of the day they were made, so that
a later change to the checkpoint format or to the package layout that cannot read them fails the suite.
Run once, commit tests/golden/; never regenerate to make a failing test pass (that hides the break it
exists to catch). `python scripts/make_golden.py`."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ckpt_harness import train_run  # noqa: E402

from shardlab.testing import WorkerPool  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"
SHAPE = ["model.n_layer=2", "model.d_model=32", "model.n_head=2", "train.seed=5"]
LAYOUTS = {"ddp": ["parallel.strategy=ddp"], "tp2": ["parallel.tp=2"], "pp2": ["parallel.pp=2"]}


def digest(params: dict) -> dict:
    """sha256 of each full parameter's bytes: what a load must reproduce exactly, on any CPU."""
    return {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest() for k, v in sorted(params.items())}


def main() -> int:
    with WorkerPool(2) as pool:
        for name, layout in LAYOUTS.items():
            out = GOLDEN / name
            shutil.rmtree(out, ignore_errors=True)
            scratch = GOLDEN / f".{name}-run"
            shutil.rmtree(scratch, ignore_errors=True)
            overrides = SHAPE + layout + ["ckpt.every=2"]
            saved = pool.run(train_run, scratch, overrides + ["train.steps=2"], 2)
            on = pool.run(train_run, GOLDEN / f".{name}-on", overrides + ["train.steps=4"], 2)
            out.mkdir(parents=True)
            shutil.copytree(scratch / "checkpoints" / "step_000002", out / "step_000002")
            (out / "expect.json").write_text(json.dumps({
                "overrides": SHAPE + layout, "world": 2, "step": 2,
                "params_sha256": digest(saved[0]["params"]),
                # the losses of steps 3 and 4 on the machine that wrote them: a later machine's kernels may
                # differ in the last bits, so the test compares them within an error model, not bitwise
                "losses": {str(s): on[0]["losses"][s] for s in (3, 4)},
                "written_by": "scripts/make_golden.py",
            }, indent=1) + "\n")
            shutil.rmtree(scratch)
            shutil.rmtree(GOLDEN / f".{name}-on")
            print(name, sum(f.stat().st_size for f in out.rglob("*") if f.is_file()), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
