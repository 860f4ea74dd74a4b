"""The layer contract (parallel/layer.py): every layer's apply returns a handle the composition keeps, the
module carries no layer attribute, the step takes what the handles declare, and the composition and the
step never probe attributes to find out which layers they have."""
import ast
from pathlib import Path

import pytest
import torch

from shardlab import config
from shardlab.parallel.layer import Layer, the_one

SRC = Path(__file__).resolve().parents[2] / "src" / "shardlab" / "parallel"
TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.global_batch=4"]


def _handles(overrides: list[str]) -> dict:
    from shardlab import comm, parallel

    cfg = config.load(None, TINY + overrides)
    cfg = config.validate(cfg, comm.world_size())
    par = parallel.build(cfg, torch.device("cpu"))
    return {"names": [h.name for h in par.layers], "all_layers": all(isinstance(h, Layer) for h in par.layers),
            # the module is the bare model (or this rank's part): no `tp`, `cp`, `ep` handle hangs on it
            "on_module": sorted(n for n in ("tp", "cp", "ep") if n in vars(par.model) or n in vars(par.module)),
            "tp_loss": par.layer("tp") is not None and par.loss_fn == par.layer("tp").loss_fn,
            "cp_slices": par.layer("cp") is not None and par.shard_batch == par.layer("cp").shard_batch,
            "norm_groups": len(par.grad_norm_groups)}


# fp8, recompute and compile are features: each hands back a handle (a no-op one when train.fp8=none,
# train.recompute=none, train.compile=false), in the composition's order (fp8 after the pipeline split)
@pytest.mark.parametrize("overrides,names,norm_groups", [
    (["parallel.tp=2"], ["fp8", "tp", "recompute", "compile"], 1),
    (["parallel.tp=2", "parallel.tp_impl=dtensor"], ["fp8", "tp", "recompute", "compile"], 1),
    (["parallel.pp=2", "train.grad_accum=2"], ["pp", "fp8", "recompute", "compile"], 1),
    (["parallel.cp=2", "parallel.strategy=ddp"], ["fp8", "cp", "recompute", "compile"], 0),
    (["parallel.ep=2", "model.moe_experts=2", "parallel.strategy=ddp"], ["fp8", "ep", "recompute", "compile"], 0),
])
def test_every_layer_hands_back_a_handle(pool2, overrides, names, norm_groups):
    got = pool2.run(_handles, overrides)[0]
    assert got["names"] == names and got["all_layers"] and got["on_module"] == []
    assert got["norm_groups"] == norm_groups
    if "tp" in names:
        assert got["tp_loss"]  # the vocab-parallel loss came from the tp handle
    if "cp" in names:
        assert got["cp_slices"]  # the step slices the batch as the cp handle says


def test_two_layers_replacing_one_piece_are_refused():
    a, b = Layer("a", None, loss_fn=len), Layer("b", None, loss_fn=abs)
    assert the_one([a, Layer("c", None)], "loss_fn") is len
    assert the_one([Layer("c", None)], "loss_fn") is None
    with pytest.raises(ValueError, match="layers a, b each set loss_fn"):
        the_one([a, b], "loss_fn")


@pytest.mark.parametrize("path", ["compose.py", "step.py", "dp/apply.py"])
def test_the_composition_asks_handles_not_attributes(path):
    """No getattr/hasattr in the files that assemble layers and run the step, except the step's test for a
    DTensor loss (a tensor's type, not a layer): named here so that a new one is a decision, not a drift."""
    tree = ast.parse((SRC / path).read_text())
    probes = [f"{path}:{n.lineno} {ast.unparse(n)}" for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")]
    allowed = {"step.py": ["hasattr(t, 'full_tensor')"]}.get(path, [])
    assert [p.split(" ", 1)[1] for p in probes] == allowed, probes


def test_dp_views_forward_explicitly():
    """No `__getattr__` delegation anywhere in the layers: a dp view (parallel/dp/view.py) forwards the dp
    layer's interface member by member, so what each view changes is what it defines."""
    found = [f"{f.relative_to(SRC)}:{n.lineno}" for f in SRC.rglob("*.py")
             for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    assert found == []


def test_the_doctor_asks_the_replica_sets():
    """The doctor compares the replica sets the layers declare (doctor/replicas.py): it reads neither the
    mesh's degrees nor the dp layer's attributes to tell layouts apart."""
    text = (SRC.parent / "doctor" / "core.py").read_text()
    tree = ast.parse(text)
    probes = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr") and "strategy" in ast.unparse(n)]
    assert probes == [] and "dims." not in text and "self.dims" not in text


def test_schedules_are_defined_once():
    """Every name parallel.pp_schedule accepts is a row of parallel/pp/registry.py: an own one has its compute
    order, a torch one its class in torch.distributed.pipelining; the lists the rest of shardlab uses derive."""
    from torch.distributed import pipelining

    from shardlab.config import help as config_help
    from shardlab.parallel import layers
    from shardlab.parallel.pp import native, registry, schedule
    from shardlab.plan import layout

    assert set(schedule._ORDERS) == set(registry.OWN) == set(schedule.SCHEDULES)
    assert all(hasattr(pipelining, registry.SPECS[n].torch_class) for n in registry.TORCH)
    assert tuple(layers.PIPELINE_PARALLEL) == registry.NAMES and tuple(native.NATIVE) == registry.TORCH
    assert set(layout.SCHEDULES) <= set(registry.OWN)
    assert config_help.KEY_HELP["parallel.pp_schedule"][1] == " | ".join(
        n + "PATH" if n == registry.FILE else n for n in registry.NAMES)  # the table's row reads file:PATH


def test_no_schedule_name_is_spelled_outside_its_package():
    """Every property of a schedule is on its row (parallel/pp/registry.py): nothing outside parallel/pp/
    compares with, or lists, a schedule's name as a string."""
    from shardlab.parallel.pp import registry

    names = set(registry.NAMES) | set(registry.PLANNED)
    found = [f"{f.relative_to(SRC.parent)}:{n.lineno}: {n.value}" for f in SRC.parent.rglob("*.py")
             if "parallel/pp/" not in str(f.relative_to(SRC.parent)).replace("\\", "/")
             for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Constant) and n.value in names]
    assert found == []


def test_imports_keep_the_floors():
    """docs/architecture.md's import rules: no circle between modules, no import up the floors."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "check_imports.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no circle, none points up" in out.stdout, out.stdout
