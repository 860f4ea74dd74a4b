"""`train.fp8` and `train.fp8_impl` through config validation and the composition: the refusals (one line,
exit 2, nothing written), the start-up line, and what a model whose dimensions are not multiples of 16 keeps."""
import subprocess
import sys

import pytest

from cli_harness import run_in_process
from shardlab import config
from shardlab.fp8 import Float8Linear
from shardlab.parallel import compose

TINY = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "parallel.strategy=single"]


@pytest.mark.parametrize("overrides, needle", [
    (["train.fp8=tensorwise"], "not train.dtype=fp32: set train.dtype=bf16"),
    (["train.fp8=rowwise", "train.dtype=fp16"], "not train.dtype=fp16: set train.dtype=bf16"),
    (["train.fp8=bogus", "train.dtype=bf16"], "train.fp8='bogus': must be one of none, tensorwise, rowwise, mxfp8"),
    (["train.fp8=mxfp8", "train.dtype=bf16", "train.fp8_impl=torchao"], "own emulated recipe only"),
    (["train.fp8=tensorwise", "train.dtype=bf16", "train.fp8_impl=x"], "train.fp8_impl='x': must be one of own, torchao"),
])
def test_refused_in_one_line(overrides, needle):
    with pytest.raises(config.ConfigError) as e:
        config.validate(config.load(None, TINY + overrides), 1)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_dtensor_tp_refused_with_fp8():
    cfg = config.load(None, ["model.preset=tiny", "train.dtype=bf16", "train.fp8=rowwise", "parallel.tp=2",
                             "parallel.tp_impl=dtensor", "parallel.strategy=torch-fsdp2"])
    with pytest.raises(config.ConfigError, match="compose with own tensor parallelism only"):
        config.validate(cfg, 2)


def test_cli_exit_2_and_nothing_written(tmp_path):
    out = subprocess.run([sys.executable, "-m", "shardlab", "train", "--out", str(tmp_path / "run"), *TINY,
                          "train.fp8=tensorwise", "train.dtype=fp32"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and not (tmp_path / "run").exists()
    assert len(out.stderr.strip().splitlines()) == 1 and "set train.dtype=bf16" in out.stderr


def test_build_converts_and_announces(capsys):
    cfg = config.validate(config.load(None, TINY + ["train.dtype=bf16", "train.fp8=rowwise"]), 1)
    par = compose.build(cfg)
    assert sum(isinstance(m, Float8Linear) for m in par.model.modules()) == 12
    line = capsys.readouterr().out
    assert "fp8 rowwise: 12 linears converted; stay: lm_head" in line and "[own]" in line
    assert par.layer("fp8").impl.converted[0] == "blocks.0.attn.q"


def test_none_converts_nothing():
    cfg = config.validate(config.load(None, TINY + ["train.dtype=bf16"]), 1)
    par = compose.build(cfg)
    assert not any(isinstance(m, Float8Linear) for m in par.model.modules())


def test_unaligned_dimensions_convert_what_they_can(capsys):
    """d_model 72 (not a multiple of 16): nothing in attention converts; an MLP of 4 x 72 = 288 neither;
    the start-up line names each skipped linear and why."""
    cfg = config.validate(config.load(None, ["model.preset=custom", "model.n_layer=1", "model.n_head=4",
                                             "model.d_model=72", "train.seq_len=32", "train.micro_batch=2",
                                             "parallel.strategy=single", "train.dtype=bf16",
                                             "train.fp8=tensorwise"]), 1)
    compose.build(cfg)
    line = capsys.readouterr().out
    assert "0 linears converted" in line and "blocks.0.mlp.fc (72x288 features are not multiples of 16)" in line


def test_metrics_carry_the_casts_and_the_doctor_names_the_first_nonfinite_scale(tmp_path):
    """Logged steps hold each converted layer's amax, scale, underflow and saturation per operand; a NaN
    planted in blocks.0.mlp.fc's output reaches the float8 casts first as blocks.0.mlp.proj's input."""
    # one process, single device: run through shardlab's main here (the launcher runs it in-process either way)
    out = run_in_process(["train", "--out", str(tmp_path / "run"), *TINY, "train.steps=4", "train.log_every=2",
                          "train.eval_every=0", "train.dtype=bf16", "train.fp8=tensorwise",
                          "debug.inject_nan=2:0:blocks.0.mlp.fc"])
    assert "The first float8 layer whose scale went non-finite: blocks.0.mlp.proj input" in out.stderr
    import json
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    fp8 = next(r["fp8"] for r in rows if r.get("step") == 2)
    assert len(fp8) == 12 and set(fp8["blocks.1.mlp.fc"]) == {"input", "weight", "grad"}
    assert set(fp8["blocks.1.mlp.fc"]["grad"]) == {"amax", "scale", "underflow", "saturated"}
