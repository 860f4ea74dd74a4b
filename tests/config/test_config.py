"""Config and CLI validation: every bad input is one clear line, exit code 2, nothing written."""
import pytest

from shardlab import cli, config
from shardlab.config import help as config_help, schema
from shardlab.config import ConfigError
from shardlab.testing import run_cli


def _train(args, capsys):
    code = cli.cmd_train(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, needle", [
    (["train.stpes=5"], "did you mean train.steps"),
    (["train.steps=abc"], "expected int"),
    (["parallel.strategy=zero9"], "must be one of"),
    (["model.preset=custom", "model.n_layer=2", "model.n_head=5", "model.d_model=64"], "does not divide"),
    (["train.global_batch=10", "train.micro_batch=4"], "not divisible by world size x micro batch"),
    (["train.steps"], "must look like key=value"),
    (["data.source=text:/no/such/file"], "/no/such/file"),
    (["parallel.strategy=single", "--nproc", "2"], "runs on one process"),
    (["parallel.cp=2", "parallel.tp=2", "parallel.tp_impl=dtensor", "--nproc", "4"], "not implemented yet"),
    (["parallel.dp_replicate=3"], "must equal the world"),
    (["parallel.dp=zero3", "parallel.dp_shard=-1", "parallel.cp=-1"], "at most one degree"),
    (["train.grad_accum=3", "train.global_batch=16", "train.micro_batch=4"], "contradicts"),
    (["debug.corrupt_expert=true", "debug.corrupt_rank=1@2"], "set parallel.ep > 1"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, needle):
    out = tmp_path / "run"
    code, err = _train(["--out", str(out), *args], capsys)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_toml_round_trip_and_overrides_win(tmp_path):
    cfg = config.load("configs/default.toml", ["train.steps=7", "parallel.bucket_mb=2", "ckpt.async=true"])
    assert cfg.train.steps == 7 and cfg.parallel.bucket_mb == 2.0 and cfg.ckpt.async_ is True
    path = tmp_path / "c.toml"
    path.write_text(config.to_toml(cfg))
    again = config.load(path)
    assert config.to_dict(again) == config.to_dict(cfg)


def test_global_batch_derives_grad_accum():
    cfg = config.load(None, ["train.global_batch=32", "train.micro_batch=4"])
    cfg = config.validate(cfg, world_size=2)
    assert cfg.train.grad_accum == 4
    cfg = config.load(None, ["train.micro_batch=4", "train.grad_accum=2"])
    cfg = config.validate(cfg, world_size=4)
    assert cfg.train.global_batch == 32


def test_bad_toml_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nsteps = = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "missing.toml")


def test_cli_exit_code_in_a_real_process(tmp_path):
    res = run_cli(["train", "--out", str(tmp_path / "r"), "parallel.bucket_mbb=3"], timeout=60)
    assert res.returncode == 2
    # one line in a real process too (no import-time warnings around it): the in-process refusal tests
    # (test_pipeline_cli, test_tp_compose, test_cp) rely on this one for the process boundary
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "did you mean parallel.bucket_mb" in lines[0], res.stderr
    assert not (tmp_path / "r").exists()


def test_every_key_has_a_description_and_allowed_values(capsys):
    """--help-keys: each key's default, allowed values and one line; the descriptions live in config.py
    (KEY_HELP), so a key added without one fails here."""
    keys = config.all_keys()
    assert sorted(config_help.KEY_HELP) == sorted(keys)
    assert all(text.strip() and allowed.strip() for text, allowed in config_help.KEY_HELP.values())
    assert cli.cmd_train(["--help-keys"]) == 0
    out = capsys.readouterr().out
    for key in keys:
        assert f"{key} = " in out and config_help.KEY_HELP[key][0] in out
    assert "0 means \"derive it\"" in out and "STEP:RANK:MODULE" in out and "R@STEP" in out


def test_listed_choices_are_the_validated_ones():
    """For keys with a fixed set of values, the help lists exactly what validation accepts."""
    import re
    for key, (_, allowed) in config_help.KEY_HELP.items():
        options = [o.strip() for o in allowed.split("|")]
        section, name = key.split(".")
        default = getattr(getattr(config.Config(), section), schema._field_name(name))
        if not isinstance(default, str) or not all(re.fullmatch(r"[a-z0-9-]+", o) for o in options):
            continue  # free-form (paths, numbers, formats)
        cfg = config.load(None, [f"{key}=not-a-choice"])
        with pytest.raises(ConfigError, match="must be one of") as e:
            cfg = config.validate(cfg, 2)
        assert str(e.value).endswith(", ".join(options)), key
