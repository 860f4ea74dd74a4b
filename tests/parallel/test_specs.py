"""Every layer declares itself once (parallel/spec.py): the specs import without torch, their entries,
checks and cost hooks resolve, their keys are the config's, and the composition and validation iterate
over them (parallel/layers.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from shardlab import config
from shardlab.config import schema
from shardlab.parallel import layers, rules
from shardlab.parallel.spec import load

SPEC_MODULES = ["shardlab.parallel.dp.spec", "shardlab.parallel.fp8_spec", "shardlab.parallel.tp.spec", "shardlab.parallel.cp.spec",
                "shardlab.parallel.ep.spec", "shardlab.parallel.pp.spec", "shardlab.parallel.recompute_spec",
                "shardlab.parallel.compile_spec", "shardlab.parallel.layers", "shardlab.parallel.rules"]


def test_specs_import_without_torch():
    code = (f"import sys, importlib\nfor m in {SPEC_MODULES!r}: importlib.import_module(m)\n"
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
            "assert not bad, bad[:5]\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_every_spec_is_listed_once_in_the_composition_order():
    names = [s.name for s in layers.SPECS]
    assert names == ["pp", "fp8", "tp", "cp", "ep", "recompute", "compile", "dp"] and len(set(names)) == len(names)
    assert [s.name for s in layers.CHECKED][-1] == "pp"  # the stage split is checked last
    assert tuple(layers.DATA_PARALLEL) == schema.STRATEGIES
    assert layers.REPLICATING == ("single", "ddp", "torch-ddp")
    assert layers.HSDP == ("zero1", "zero2", "zero3", "torch-fsdp2")


@pytest.mark.parametrize("spec", layers.SPECS, ids=lambda s: s.name)
def test_entries_checks_and_cost_hooks_resolve(spec):
    for impl in spec.impls:
        assert callable(load(impl.entry)), impl
    for entry in (*spec.checks, *spec.cost.values(), *([spec.inference] if spec.inference else [])):
        assert callable(load(entry)), entry
    if spec.choose:  # the key that picks the implementation is a config key, and its choices are the impls
        assert spec.choose in schema.all_keys()
    for other, partners in spec.composes_with.items():
        assert set(partners) <= set(layers.BY_NAME[other].names)


def test_spec_keys_are_config_keys_and_declared_once():
    keys = [k.name for s in layers.SPECS for k in s.keys]
    assert len(keys) == len(set(keys)) and set(keys) <= set(schema.all_keys())
    from shardlab.config.help import KEY_HELP
    assert all(KEY_HELP[k] == v for k, v in layers.key_help().items())
    assert KEY_HELP["parallel.cp_impl"][1] == "own | torch | ulysses | hybrid" and KEY_HELP["parallel.tp_impl"][1] == "own | dtensor"


@pytest.mark.parametrize("overrides, world, needle", [
    (["parallel.tp=2", "parallel.tp_impl=dtensor", "parallel.strategy=ddp"], 4,
     "parallel.tp_impl=dtensor does not compose with parallel.dp=ddp in this version; use one of single, "
     "torch-fsdp2 (or parallel.tp_impl=own)"),
    (["parallel.cp=2", "parallel.strategy=torch-zero1"], 4,
     "parallel.cp=2 does not compose with parallel.dp=torch-zero1 in this version; use one of ddp, zero1, "
     "zero2, zero3, torch-ddp, torch-fsdp2"),
    (["parallel.ep=2", "model.moe_experts=4", "parallel.strategy=zero1"], 2,
     "parallel.ep=2 with parallel.dp=zero1: expert parallelism composes with ddp, torch-ddp in this version"),
    (["parallel.pp=2", "parallel.strategy=torch-ddp", "train.grad_accum=2"], 4,
     "parallel.dp=torch-ddp with parallel.pp=2: torch DDP cannot have several microbatches' forwards in flight; "
     "use ddp, zero1, zero2, zero3 or torch-fsdp2"),
    (["parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_virtual=2", "parallel.strategy=zero3",
      "train.grad_accum=4", "model.n_layer=4"], 4,
     "parallel.pp_virtual=2 with parallel.dp=zero3: zero3 gathers, prefetches and reshards its units in the order "
     "of one forward through the rank's part, and virtual stages interleave several; use ddp, zero1 or zero2, or "
     "parallel.pp_virtual=1"),
])
def test_the_rules_table_says_the_lines_users_saw(overrides, world, needle):
    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=32"] + overrides)
    with pytest.raises(config.ConfigError) as e:
        config.validate(cfg, world)
    assert str(e.value) == needle
    from shardlab.parallel.mesh import resolve_run
    assert rules.refusals(cfg, resolve_run(cfg, world).dims)[0] == needle


def test_validate_returns_a_resolved_copy_and_leaves_its_input_alone():
    cfg = config.load(None, ["model.preset=llama-tiny", "train.seq_len=32", "train.micro_batch=1",
                                "train.global_batch=8"])
    before = config.to_dict(cfg)
    out = config.validate(cfg, 2)
    assert config.to_dict(cfg) == before and out is not cfg
    assert (out.train.grad_accum, out.train.global_batch, out.model.arch) == (4, 8, "llama")
    from shardlab.parallel.mesh import resolve_run
    run = resolve_run(cfg, 2)
    assert (run.grad_accum, run.global_batch, run.dims.dp_size) == (4, 8, 2)
    assert resolve_run(out, 2) == run  # idempotent on the config it resolved
