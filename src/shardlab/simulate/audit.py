"""The device audit: what one simulated step does with devices, op by op.

The accelerator is simulated by the `meta` device (shapes and dtypes, no data, no memory): forward,
backward and AdamW run on it. Its kernels, however, accept a meta tensor beside a CPU one, so nothing
would fail where a GPU does; this audit is what fails instead. Two interposers see every op:

- a `TorchFunctionMode` (Python level, before defaults are filled in): factory functions called without
  `device=` inside the step (on a GPU they land on the host), and the host syncs that never reach the
  dispatcher on meta (`.numpy()`, `.tolist()`): counted and answered with a placeholder;
- a `TorchDispatchMode` (ATen level): any op whose operands mix the simulated device with host tensors
  (a 0-dim host tensor is a scalar, which CUDA kernels accept too), the host syncs (`_local_scalar_dense`:
  `.item()`, `float(t)`, `bool(t)`; a copy to the host: `.cpu()`, `.to("cpu")`), each answered with a
  placeholder so the step goes on, and the allocation trace (bytes alive on the simulated device, their
  peak) that the dry run reports.

Each finding names the ATen op (or Python function) and the innermost source line of shardlab that
issued it (`parallel/dp/zero.py:145`), so a failing test says what to fix.
"""
from __future__ import annotations

import contextlib

import os
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../shardlab
_SELF = os.path.dirname(os.path.abspath(__file__))  # this package: never the culprit
aten = torch.ops.aten

# Factory functions whose device must be named inside a step (the `*_like` and `Tensor.new_*` ones
# follow a tensor's device and are fine).
FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.arange, torch.rand, torch.randn,
             torch.randint, torch.randperm, torch.tensor, torch.as_tensor, torch.linspace, torch.eye,
             torch.empty_strided, torch.scalar_tensor}
# Host syncs that stop at the Python level on meta (the dispatcher never sees them).
PY_SYNCS = {torch.Tensor.numpy: "numpy", torch.Tensor.tolist: "tolist"}
_COPY_OPS = {aten._to_copy.default, aten.copy_.default, aten._copy_from.default, aten.to.dtype_layout,
             aten.to.device, aten.to.dtype, aten.to.other, aten.lift_fresh.default, aten.lift_fresh_copy.default}
_SCALAR_OPS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default}


_WRAPPERS = ("/torch/utils/_python_dispatch", "/torch/overrides", "/torch/_ops", "/torch/_dynamo/",
             "/torch/utils/_contextlib", "/torch/_compile", "/torch/autograd/grad_mode")  # not the culprit


def where() -> tuple[str, str]:
    """(the source line that issued the op, the module answerable for it): the innermost frame that is
    neither torch nor this package, as 'parallel/step.py:96' inside shardlab (else the file's name and line,
    a test's hook say). When torch's own code issued the op on that line's behalf (a torch-native layer,
    an optimizer), its innermost frame is added ('... via torch/nn/parallel/distributed.py:1775') and torch's
    module is the one answerable (budgets name it)."""
    f = sys._getframe(1)
    inner_torch = None
    while f is not None:
        path = f.f_code.co_filename
        if path.startswith(_SELF) or "<" in path:
            pass
        elif "/torch/" in path:
            if inner_torch is None and not any(w in path for w in _WRAPPERS):
                inner_torch = "torch/" + path.rsplit("/torch/", 1)[1] + f":{f.f_lineno}"
        else:
            if path.startswith(_PKG):
                rel = os.path.relpath(path, _PKG)
                site, module = f"{rel}:{f.f_lineno}", "shardlab." + rel[:-3].replace(os.sep, ".")
            else:
                site, module = f"{os.path.basename(path)}:{f.f_lineno}", os.path.basename(path)[:-3]
            if inner_torch:
                return f"{site} via {inner_torch}", inner_torch.rsplit(":", 1)[0][:-3].replace("/", ".")
            return site, module
        f = f.f_back
    return inner_torch or "?", ""


@dataclass
class Finding:
    kind: str  # "mixing" | "no-device" | "host-sync" | "collective"
    op: str
    where: str
    module: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.op} at {self.where}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Audit:
    """What one step did. `findings` hold every violation and every host sync (kind "host-sync");
    budgets are applied by `violations()`."""
    sim: str = "meta"  # the stand-in device
    findings: list = field(default_factory=list)
    live: int = 0  # bytes alive on the simulated device
    peak: int = 0
    host: bool = False  # the stand-in plays the host (a CPU run): only errors and collectives are findings
    autocast: torch.dtype | None = None  # inside the step's autocast region: the low precision
    recording: bool = True  # off while building: the trace goes on, findings are not the step's
    tracking: bool = True  # off while the model is built on meta (parallel/materialize.py): nothing is allocated
    _seen: set = field(default_factory=set)

    def add(self, kind: str, op: str, detail: str = "") -> None:
        if not self.recording or (self.host and kind in ("mixing", "no-device")):
            return
        w, mod = where()
        key = (kind, op, w)
        if kind != "host-sync" and key in self._seen:  # one report per site (syncs are counted)
            return
        self._seen.add(key)
        self.findings.append(Finding(kind, op, w, mod, detail))

    def add_error(self, e: BaseException) -> None:
        """An exception the step raised (torch refusing a cross-device `.grad`, say): named by the innermost
        shardlab line of its traceback."""
        import traceback

        site, mod = "?", ""
        for fr in traceback.extract_tb(e.__traceback__):
            if fr.filename.startswith(_PKG) and not fr.filename.startswith(_SELF):
                rel = os.path.relpath(fr.filename, _PKG)
                site, mod = f"{rel}:{fr.lineno}", "shardlab." + rel[:-3].replace(os.sep, ".")
        msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        self.findings.append(Finding("error", type(e).__name__, site, mod, msg))

    def syncs(self) -> list:
        return [f for f in self.findings if f.kind == "host-sync"]

    def reset_peak(self) -> None:
        self.peak = self.live

    # --- the allocation trace: storages created on the simulated device, freed when collected ------------
    def track(self, out) -> None:
        if not self.tracking:
            return
        for t in _tensors(out):
            if t.device.type != self.sim:
                continue
            st = t.untyped_storage()
            key = id(st)
            if key in _TRACKED:
                continue
            n = st.nbytes()
            _TRACKED[key] = n
            self.live += n
            self.peak = max(self.peak, self.live)
            weakref.finalize(st, _free, self, key)


_TRACKED: dict = {}


@contextlib.contextmanager
def untracked(audit: Audit):
    """The meta phase of a build: tensors made here are shapes, not allocations (parallel/materialize.py)."""
    saved, audit.tracking = audit.tracking, False
    try:
        yield
    finally:
        audit.tracking = saved


def is_untracked(t: torch.Tensor) -> bool:
    """What the simulation calls unallocated: a meta tensor whose storage the trace never counted."""
    return t.is_meta and id(t.untyped_storage()) not in _TRACKED


def _resized(audit: Audit):
    """`UntypedStorage.resize_` as the trace sees it: zero3 frees a gathered unit's storage by resizing it to 0
    and allocates it again the same way; a tracked storage's bytes follow."""
    resize = torch.UntypedStorage.resize_

    def resize_(st, size):
        out = resize(st, size)
        key = id(st)
        if key in _TRACKED:
            n = st.nbytes()
            audit.live += n - _TRACKED[key]
            _TRACKED[key] = n
            audit.peak = max(audit.peak, audit.live)
        return out
    return resize, resize_


def _free(audit: Audit, key: int) -> None:
    audit.live -= _TRACKED.pop(key, 0)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _placeholder(dtype: torch.dtype):
    """What a host sync answers in simulation: no data exists, so a neutral value (no inf found, a zero
    count, a false flag)."""
    if dtype == torch.bool:
        return False
    return 0.0 if dtype.is_floating_point or dtype.is_complex else 0


# Autocast on the stand-in device (torch has no autocast for meta): what CUDA's autocast does for the ops a
# step uses. Matrix products run in the low precision, the losses and normalisations in fp32. Emulated at the
# Python level, above autograd, as autocast itself sits above it: backward sees the casts.
import torch.nn.functional as F  # noqa: E402

_LOW = {F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.bmm, torch.addmm,
        torch.baddbmm, F.scaled_dot_product_attention, torch.einsum}
_FP32 = {F.cross_entropy, F.log_softmax, F.softmax, torch.softmax, torch.log_softmax, F.layer_norm,
         torch.nn.functional.mse_loss, torch.logsumexp, torch.Tensor.softmax, torch.Tensor.log_softmax}


def _cast(x, dtype):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype and x.dtype != torch.float64:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(y, dtype) for y in x)
    return x


class FunctionAudit(TorchFunctionMode):
    def __init__(self, audit: Audit):
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        a = self.audit
        if a.autocast is not None and (func in _LOW or func in _FP32):
            dtype = a.autocast if func in _LOW else torch.float32
            if func is not torch.einsum:
                args = tuple(_cast(x, dtype) for x in args)
            else:
                args = (args[0],) + tuple(_cast(x, dtype) for x in args[1:])
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        if func in FACTORIES and kwargs.get("device") is None:
            a.add("no-device", f"torch.{func.__name__}", "created on the host: name the device")
        elif func in PY_SYNCS and args and isinstance(args[0], torch.Tensor) and args[0].device.type == a.sim:
            t = args[0]
            a.add("host-sync", f"Tensor.{PY_SYNCS[func]}")
            host = torch.zeros(t.shape, dtype=t.dtype, device="cpu")
            return host.numpy() if func is torch.Tensor.numpy else host.tolist()
        return func(*args, **kwargs)


class DispatchAudit(TorchDispatchMode):
    def __init__(self, audit: Audit):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        a, sim = self.audit, self.audit.sim
        flat = list(_tensors(list(args) + list(kwargs.values())))
        on_sim = any(t.device.type == sim for t in flat)
        if func in _SCALAR_OPS and on_sim:  # .item(), float(t), bool(t), if t: ...
            a.add("host-sync", _op_name(func, args))
            return _placeholder(flat[0].dtype) if func is aten._local_scalar_dense.default else False
        if func in _COPY_OPS:
            dst = _copy_target(func, args, kwargs)
            src = args[1] if func in (aten.copy_.default, aten._copy_from.default) else args[0]
            if on_sim and dst == "cpu" and isinstance(src, torch.Tensor) and src.device.type == sim:
                if not kwargs.get("non_blocking", False) and not (len(args) > 2 and args[2] is True):
                    a.add("host-sync", ".cpu()" if func is not aten.copy_.default else "copy_ to host",
                          f"{tuple(src.shape)} {str(src.dtype).replace('torch.', '')}")
                # no data to copy out of meta: the host tensor keeps whatever it held (zeros when new)
                if func is aten.copy_.default:
                    return args[0]
                return torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype, device="cpu")
        elif func.overloadpacket in _ATEN_FACTORIES and not on_sim and _in_backward() and not _function_audit_on():
            # backward (torch leaves function modes off there): the call's own line must name the device
            out = func(*args, **kwargs)
            line = _culprit_line()
            if any(t.device.type == "cpu" for t in _tensors(out)) and "device" not in line \
                    and not any(read in line for read in (".tolist()", ".numpy()", ".item()", ".cpu()")):
                a.add("no-device", f"aten::{func.overloadpacket.__name__}", "created on the host: name the device")
            a.track(out)
            return out
        elif on_sim and func not in _EXEMPT:
            host = [t for t in flat if t.device.type == "cpu" and t.dim() > 0]
            if host:
                shapes = ", ".join(f"{t.device.type}{tuple(t.shape)}" for t in flat[:4])
                a.add("mixing", _op_name(func, args), f"operands on the device and the host: {shapes}")
        out = func(*args, **kwargs)
        a.track(out)
        return out


_ATEN_FACTORIES = {aten.empty, aten.zeros, aten.ones, aten.full, aten.arange, aten.rand, aten.randn, aten.randint,
                   aten.randperm, aten.scalar_tensor, aten.empty_strided, aten.linspace, aten.eye}


def _function_audit_on() -> bool:
    from torch.overrides import _get_current_function_mode_stack
    return any(isinstance(m, FunctionAudit) for m in _get_current_function_mode_stack())


def _in_backward() -> bool:
    """Whether autograd is running a backward pass on this thread (torch >= 2.1 says; older: assume so)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is None or task() != -1


def _culprit_line() -> str:
    """The source text of the innermost frame that is neither torch nor this package."""
    import linecache

    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith(_SELF) and "/torch/" not in path and "<" not in path:
            return linecache.getline(path, f.f_lineno)
        f = f.f_back
    return "device"  # nothing to blame


def recomputed_under_audit(checkpoint, audit: "Audit"):
    """`torch.utils.checkpoint.checkpoint` whose function, when recomputed in backward (where torch leaves
    function modes off), runs under this audit's function mode again: the recompute is audited like the
    forward, and recomputes in the emulated autocast's precision (else its saved tensors would differ)."""
    def audited_checkpoint(fn, *args, **kwargs):
        def run(*a, **k):
            if _function_audit_on():
                return fn(*a, **k)
            with FunctionAudit(audit):
                return fn(*a, **k)
        return checkpoint(run, *args, **kwargs)
    return audited_checkpoint


# Ops that legitimately see both devices (they move data between them or only read metadata).
_EXEMPT = {aten.set_.source_Storage, aten.set_.source_Storage_storage_offset, aten.set_.source_Tensor}


def _copy_target(func, args, kwargs):
    if func in (aten.copy_.default, aten._copy_from.default):
        dst = args[0] if func is aten.copy_.default else args[1]
        return dst.device.type
    dev = kwargs.get("device")
    if dev is None and func is aten.to.device:
        dev = args[1]
    if dev is None and func is aten.to.other:
        dev = args[1].device
    return torch.device(dev).type if dev is not None else None


def _op_name(func, args) -> str:
    name = str(func.overloadpacket).replace("aten.", "aten::")
    return name


class emulated_autocast:
    """What `Parallel.autocast()` enters in simulation (`torch.autocast` refuses the meta device)."""

    def __init__(self, audit: Audit, dtype: torch.dtype | None):
        self.audit, self.dtype, self.saved = audit, dtype, None

    def __enter__(self):
        self.saved, self.audit.autocast = self.audit.autocast, self.dtype
        return self

    def __exit__(self, *exc):
        self.audit.autocast = self.saved
        return False


class audited:
    """`with audited(audit): ...` — both interposers around a step (or a build, for the trace)."""

    def __init__(self, audit: Audit):
        self.audit = audit
        self._modes = None

    def __enter__(self):
        self._modes = (FunctionAudit(self.audit), DispatchAudit(self.audit))
        for m in self._modes:
            m.__enter__()
        self._resize, torch.UntypedStorage.resize_ = _resized(self.audit)
        return self.audit

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        for m in reversed(self._modes):
            m.__exit__(*exc)
        return False


__all__ = ["Audit", "Finding", "audited", "np"]
