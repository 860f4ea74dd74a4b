"""The launcher's torchrun command under an older torch than the pinned one. The first GPU machine had torch 2.11,
whose torchrun has no --shutdown-timeout (new in 2.12): every multi-rank run exited 2 before a rank started,
while the suite (pinned 2.13) passed. The agent now drops the option where torchrun lacks it and applies the
grace as the default timeout of the workers' close; this emulates the older parser."""
import argparse
import copy
from types import SimpleNamespace

import torch.distributed.run as torchrun
from torch.distributed.elastic.multiprocessing import api

from shardlab.launch.agent import shutdown_timeout_compat
from shardlab.launch.launcher import torchrun_command


def _older_parser() -> argparse.ArgumentParser:
    """torchrun's parser without --shutdown-timeout (torch <= 2.11)."""
    parser = copy.deepcopy(torchrun.get_args_parser())
    action = next(a for a in parser._actions if "--shutdown-timeout" in a.option_strings)
    parser._remove_action(action)
    for opt in action.option_strings:
        parser._option_string_actions.pop(opt)
    return parser


def _command(tmp_path) -> list[str]:
    args = SimpleNamespace(nproc=2, max_restarts=0, nnodes=1, node_rank=0, master_addr="127.0.0.1",
                           master_port=29999)
    cmd = torchrun_command(args, tmp_path / "run", tmp_path / "config.toml", grace_s=40)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    return cmd[3:]


def test_the_command_parses_under_an_older_torchrun_and_keeps_the_grace(tmp_path, monkeypatch):
    older = _older_parser()
    argv = _command(tmp_path)
    assert "--shutdown-timeout=45" in argv
    real_close = api.PContext.close
    monkeypatch.setattr(api.PContext, "close", real_close)  # restored after the test whatever happens
    out = shutdown_timeout_compat(argv, older)
    assert not any(a.startswith("--shutdown") for a in out)
    ns = older.parse_args(out)  # would exit 2 on the unknown option
    assert ns.nproc_per_node == "2" and ns.training_script == "shardlab"
    seen = {}
    monkeypatch.setattr(api.PContext, "close", lambda self, death_sig=None, timeout=30: seen.update(t=timeout))
    shutdown_timeout_compat(argv, older)  # wraps the close in place now
    api.PContext.close(object())
    assert seen == {"t": 45}  # the older agent's close(death_sig) waits the run's grace, not 30 s


def test_a_torchrun_that_knows_the_option_gets_the_command_as_is(tmp_path):
    argv = _command(tmp_path)
    assert shutdown_timeout_compat(argv, torchrun.get_args_parser()) == argv
    assert torchrun.get_args_parser().parse_args(argv).shutdown_timeout == 45
