"""Bytes a rank allocates on the host, traced: the build-peak tests of parallel/ (the composition's meta
build) and generate/ (generation's per-rank load) count storages the same way."""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class StorageTrace(TorchDispatchMode):
    """Bytes alive in host storages created inside, and their peak; a storage resized (zero3 frees and
    regathers a unit's full storage so) counts at its new size."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._seen: dict[int, int] = {}

    def __enter__(self):
        resize = self._resize = torch.UntypedStorage.resize_

        def resize_(st, size):
            out = resize(st, size)
            if id(st) in self._seen:
                self.live += st.nbytes() - self._seen[id(st)]
                self._seen[id(st)] = st.nbytes()
                self.peak = max(self.peak, self.live)
            return out
        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    def _free(self, key):
        self.live -= self._seen.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and not hasattr(t, "_local_tensor"):
                st = t.untyped_storage()
                if id(st) not in self._seen and st.nbytes():
                    self._seen[id(st)] = st.nbytes()
                    self.live += st.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(st, self._free, id(st))
        return out
