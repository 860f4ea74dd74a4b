"""torch's state dicts of a replicating layer, with the names resolved once per layout.

`get_model_state_dict` / `get_optimizer_state_dict` resolve every parameter's FQN again at every call
(~0.02 s each for gpt2, twice per checkpoint load and per save: more than reading a tenth of the
checkpoint). For a module whose tensors are plain and whose state dict is the default one, the answer
is a function of which tensors the module and the optimizer hold: `StateNames` keeps torch's answer
as (name -> live tensor) and rebuilds it from the live tensors while those are the same objects at the
same addresses (the signature: every parameter's and buffer's identity, address, dtype, shape and
strides; each param group's parameters, and each optimizer state's keys and value types: its values are
read from the live state, as torch's answer holds them). Anything else recomputes with torch (a new tensor, a
custom `state_dict`, DTensors); a cached answer is the same dict torch gives: the same names in the same
order, the same hyperparameters, detached views of the same parameters, the optimizer's own state
tensors (tests/checkpoint/test_ckpt_reader.py compares them).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab.parallel.dp.in_place import held, places, walk, where


def _tensors(module: nn.Module) -> list:
    params, buffers, _, _ = walk(module)
    return params + buffers


def _model_signature(module: nn.Module) -> tuple | None:
    return held("signature", module, lambda: _signature(module))  # (once per load)


def _signature(module: nn.Module) -> tuple | None:
    params, buffers, plain_save, _ = walk(module)
    ts = params + buffers
    if not plain_save or any(type(t) not in (torch.Tensor, nn.Parameter) for t in ts):
        return None
    return tuple(zip(map(id, ts), places(module)))


def _optim_signature(optimizer) -> tuple:
    """Which parameters each group holds, and which parameters have state under which keys, of which types.
    Not the state tensors' places: the rebuild reads them from the live state (torch's answer holds the
    optimizer's own state objects, whatever they are; the model's signature covers the names)."""
    groups = tuple(tuple(map(id, g["params"])) for g in optimizer.param_groups)
    state = tuple((id(p), tuple(st), tuple(map(type, st.values()))) for p, st in optimizer.state.items())
    return groups, state


class StateNames:
    def __init__(self):
        self._model = None  # (signature, [(fqn, live tensor)])
        self._optim = None  # (signature, [(fqn, parameter)] of the state, [(keys, [fqn])] of the groups)

    def model(self, module: nn.Module, compute) -> dict:
        sig = _model_signature(module)
        if sig is not None and self._model is not None and self._model[0] == sig:
            return {fqn: t.detach() for fqn, t in self._model[1]}
        sd = compute()
        self._model = None
        if sig is not None and all(type(v) is torch.Tensor for v in sd.values()):
            live = {where(t): t for t in _tensors(module)}
            pairs = [(fqn, live.get(where(v))) for fqn, v in sd.items()]
            if all(t is not None for _, t in pairs):
                self._model = (sig, pairs)
        return sd

    def optim(self, module: nn.Module, optimizer, compute) -> dict:
        sig = (_model_signature(module), _optim_signature(optimizer))
        if sig[0] is not None and self._optim is not None and self._optim[0] == sig:
            return self._rebuild(optimizer)
        sd = compute()
        self._optim = None
        if sig[0] is not None:
            self._optim = _template(optimizer, sd, sig)
        return sd

    def _rebuild(self, optimizer) -> dict:
        _, state, groups = self._optim
        return {"state": {fqn: dict(optimizer.state[p]) for fqn, p in state},
                "param_groups": [{k: (list(fqns) if k == "params" else g[k]) for k in keys}
                                 for g, (keys, fqns) in zip(optimizer.param_groups, groups)]}


def _template(optimizer, sd: dict, sig: tuple):
    """What rebuilds `sd` (torch's answer) from the optimizer, or None when it is not simply that: its
    state values the optimizer's own tensors, its hyperparameters the optimizer's."""
    if set(sd) != {"state", "param_groups"} or len(sd["param_groups"]) != len(optimizer.param_groups):
        return None
    param_of, groups = {}, []
    for g, tg in zip(optimizer.param_groups, sd["param_groups"]):
        hyper = {k: v for k, v in tg.items() if k != "params"}
        if (len(g["params"]) != len(tg.get("params", ())) or any(torch.is_tensor(v) for v in hyper.values())
                or any(k not in g or type(g[k]) is not type(v) or g[k] != v for k, v in hyper.items())):
            return None
        param_of.update(zip(tg["params"], g["params"]))
        groups.append((list(tg), list(tg["params"])))
    state = []
    for fqn, st in sd["state"].items():
        p = param_of.get(fqn)
        live = optimizer.state.get(p) if p is not None else None
        if live is None or list(live) != list(st) or any(live[k] is not v for k, v in st.items()):
            return None
        state.append((fqn, p))
    return sig, state, groups
