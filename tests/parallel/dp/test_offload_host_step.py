"""ZeRO-Offload with the parameters on an accelerator (parallel.offload=optimizer, parallel/dp/host_step.py):
the optimizer steps host master copies of the shards, the gradients are copied to the host and the updated
shards back. No accelerator here: the CPU stands in for the device (the same code, every copy a real one,
no side stream), and the simulated-device check (tests/simulate/test_device_discipline.py) runs it with
the parameters on the stand-in accelerator. Bitwise the trajectory without offload: the host runs the
same AdamW update on the same values, only where the tensors live differs."""
import pytest
import torch

from memory_harness import host_offload, on_cpu_as_accelerator, resumed
from shardlab import comm
from zero_harness import save as save_ckpt


def _bitwise(rank_out: dict, tiers) -> None:
    for tier in tiers:
        assert rank_out[tier]["losses"] == rank_out["none"]["losses"], tier
        assert rank_out[tier]["norms"] == rank_out["none"]["norms"], tier


def _params_bitwise(out0: dict, tiers) -> None:
    for tier in tiers:
        for k, v in out0["none"]["params"].items():
            assert torch.equal(out0[tier]["params"][k], v), (tier, k)


def _offloaded(rank_out: dict, tiers) -> None:
    """The accelerator path ran: no optimizer state counted on the device, Adam's state plus the masters
    and gradient buffers (4 + 4 bytes an element of the shards, as much as Adam's 8) counted off it."""
    adam = rank_out["none"]["state"]["optimizer"]
    for tier in tiers:
        st = rank_out[tier]["state"]
        assert adam > 0 and st["optimizer"] == 0 and st["offloaded"] == 2 * adam, (tier, st)


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_world1_bitwise_equal_to_no_offload(name):
    if comm.is_initialized():
        pytest.skip("runs as a one-process world")
    out = host_offload(name, steps=4)
    _bitwise(out, ("host", "disk"))
    _params_bitwise(out, ("host", "disk"))
    _offloaded(out, ("host", "disk"))


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_world2_bitwise_equal_to_no_offload(pool2, name):
    """Two microbatches a step (zero2/zero3 accumulate in the shard, zero1 in the full gradient), clipping on:
    the host steps the finished gradient."""
    out = pool2.run(host_offload, name, steps=4, accum=2)
    for rank_out in out:
        _bitwise(rank_out, ("host", "disk"))
        _offloaded(rank_out, ("host", "disk"))
    _params_bitwise(out[0], ("host", "disk"))


def test_zero3_finer_units_and_no_prefetch_bitwise(pool2):
    out = pool2.run(host_offload, "zero3", steps=3, to=("disk",), wrap="layer", prefetch=False)
    for rank_out in out:
        _bitwise(rank_out, ("disk",))
    _params_bitwise(out[0], ("disk",))


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_resume_takes_the_checkpoint_into_the_masters(pool2, tmp_path, tier):
    """A checkpoint written without offload loads into zero2 with the accelerator's offload (and into zero2
    without): two more steps each, bitwise the same. Stale masters (the parameters before the load) or
    an optimizer state left on the shards would part them at the first step."""
    path = str(tmp_path / "ckpt")
    pool2.run(save_ckpt, "zero2", path)
    for rank_out in pool2.run(resumed, "zero2", path, tier):
        assert rank_out[tier]["host_step"] and not rank_out["none"]["host_step"]
        assert rank_out[tier]["losses"] == rank_out["none"]["losses"]
        for k, v in rank_out["none"]["params"].items():
            assert torch.equal(rank_out[tier]["params"][k], v), k


def test_offloaded_checkpoint_loads_without_offload(pool2, tmp_path):
    """The masters' optimizer state is saved under the shards' names: a zero3 run with the accelerator's
    offload resumes as ddp, with every parameter's step count."""
    from zero_harness import load as load_ckpt

    saved = pool2.run(on_cpu_as_accelerator, save_ckpt, "zero3", str(tmp_path / "a"), offload="optimizer",
                      offload_to="host")[0]
    got = pool2.run(load_ckpt, "ddp", str(tmp_path / "a"))[0]
    assert got["steps"] == {2.0} and all(torch.equal(got["params"][k], v) for k, v in saved.items())


class _Recorded:
    """A stand-in device module whose streams and events log what is queued and waited on, in order."""

    def __init__(self, log: list):
        self.log = log
        rec = self

        class Event:
            n = 0

            def __init__(self):
                Event.n += 1
                self.k = Event.n

            def synchronize(self):
                rec.log.append(f"host waits {self.k}")

        class Stream:
            def wait_stream(self, other):
                rec.log.append(f"{self.name} waits {other.name}")

            def wait_event(self, event):
                rec.log.append(f"{self.name} waits {event.k}")

            def record_event(self):
                event = Event()
                rec.log.append(f"{self.name} marks {event.k}")
                return event

        self.compute, self.side = Stream(), Stream()
        self.compute.name, self.side.name = "compute", "side"

    def current_stream(self, device=None):
        return self.compute

    def stream(self, stream):
        import contextlib

        self.log.append(f"on {stream.name}")
        return contextlib.nullcontext()


def test_the_step_pipelines_the_copies_unit_by_unit():
    """What overlaps (docs/memory.md): every unit's gradient copy is queued on the side stream, after the
    compute stream's work, before the host waits for the first; the host then waits for one unit's
    gradients at a time, steps it, queues its copy back, and the compute stream (not the host) waits for that
    copy. Three units here (zero2, wrap=block: the root and two blocks)."""
    if comm.is_initialized():
        pytest.skip("runs as a one-process world")
    from zero_harness import TINY, _steps, setup

    par = on_cpu_as_accelerator(setup, "zero2", TINY, offload="optimizer", offload_to="host")
    _steps(par, TINY, 1)  # Adam's state exists
    log: list = []
    mod = _Recorded(log)
    par.dp.host_step.copies.mod, par.dp.host_step.copies.side = mod, mod.side
    step = par.optimizer.step

    def logged_step(*a, **k):
        log.append("host steps")
        return step(*a, **k)
    par.optimizer.step = logged_step
    batch = torch.randint(0, TINY["vocab_size"], (1, 2, TINY["max_seq_len"] + 1))
    par.forward_backward([(batch[0, :, :-1], batch[0, :, 1:])], 1.0)
    par.finish()
    par.dp.optimizer_step(par.optimizer)
    units = len(par.dp.host_step.units)
    assert units == 3
    down = ["side waits compute"] + [e for k in range(1, units + 1) for e in ("on side", f"side marks {k}")]
    up = [e for k in range(1, units + 1)
          for e in (f"host waits {k}", "host steps", "on side", f"side marks {units + k}",
                    f"compute waits {units + k}")]
    assert log == down + up
