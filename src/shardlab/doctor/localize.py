"""Localisation: replay one rank's microbatches on a single-device replica with a hook on every module,
and name the FIRST module whose forward output (or backward gradient) became non-finite.

The replica is a fresh GPT loaded with the full parameters of the step (the weights that produced the
anomaly: the optimizer has not stepped yet). It runs without any collective, so each rank replays its
own data independently, whatever the strategy. "First" means the origin: the earliest module, in
execution order, whose inputs were all finite and whose output was not. In the forward pass a child
finishes before its parent, so the innermost culprit is named (e.g. `blocks.2.mlp`, not `blocks.2`).
"""
from __future__ import annotations

import contextlib
import math
import warnings

import torch
import torch.nn as nn


from shardlab.model import anatomy
from shardlab.model.loss import cross_entropy


def _finite(x) -> bool:
    """True when every floating tensor in x (a tensor or a tuple of them) is finite; ints/None count as finite."""
    if torch.is_tensor(x):
        return not x.is_floating_point() or bool(torch.isfinite(x).all())
    if isinstance(x, (tuple, list)):
        return all(_finite(t) for t in x)
    return True


def _max_abs(x) -> float:
    if torch.is_tensor(x) and x.is_floating_point() and x.numel():
        return float(x.detach().abs().max())
    return 0.0


def build_replica(cfg, full_params: dict[str, torch.Tensor], device: torch.device) -> nn.Module:
    """A plain single-device model (GPT or llama) holding `full_params` (a strategy's `full_parameters()`)."""
    from shardlab.model.gpt import build_model, resolve_model_config  # one process, no layers: the bare model

    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), 0).to(device)
    missing, unexpected = model.load_state_dict({k: v.detach().to(device) for k, v in full_params.items()},
                                                strict=False)
    anat = anatomy.of(model)
    if anat.tied(model):  # the head's weight is the embedding's: one parameter
        missing = [k for k in missing if k != anat.weight(anat.head)]
    if missing or unexpected:
        raise RuntimeError(f"doctor: cannot build a replica for localisation: missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]}")
    return model


def replay_microbatch(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast=contextlib.nullcontext) -> dict:
    """Forward + backward of one microbatch with hooks on every module. Never communicates."""
    first_fwd: dict | None = None
    first_bwd: dict | None = None
    order = {"fwd": 0, "bwd": 0}
    handles = []

    def fwd_hook(name):
        def hook(_mod, inputs, output):
            nonlocal first_fwd
            order["fwd"] += 1
            if first_fwd is None and _finite(inputs) and not _finite(output):
                first_fwd = {"module": name, "order": order["fwd"], "input_max_abs": _max_abs(inputs[0] if inputs else None)}
        return hook

    def bwd_hook(name):
        def hook(_mod, grad_input, grad_output):
            nonlocal first_bwd
            order["bwd"] += 1
            if first_bwd is None and _finite(grad_output) and not _finite(grad_input):
                first_bwd = {"module": name, "order": order["bwd"]}
        return hook

    for name, mod in model.named_modules():
        if name:  # the root's output (the logits) is checked through the loss below
            handles.append(mod.register_forward_hook(fwd_hook(name)))
            handles.append(mod.register_full_backward_hook(bwd_hook(name)))
    try:
        model.zero_grad(set_to_none=True)
        with autocast():
            per_token = cross_entropy(model(x), y, reduction="none")
        per_sample = per_token.view(x.shape[0], -1).mean(dim=1)
        with warnings.catch_warnings():  # the embedding's integer input has no gradient: expected
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            per_token.sum().backward()
    finally:
        for h in handles:
            h.remove()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    norms = {n: float(torch.linalg.vector_norm(g.float())) for n, g in grads.items()}
    bad_grads = [n for n, v in norms.items() if not math.isfinite(v)]
    top = sorted(((n, v) for n, v in norms.items() if math.isfinite(v)), key=lambda kv: -kv[1])[:5]
    model.zero_grad(set_to_none=True)
    return {"per_sample_loss": [float(v) for v in per_sample.detach().cpu()],
            "loss_finite": bool(torch.isfinite(per_sample).all()),
            "first_nonfinite_forward": first_fwd, "first_nonfinite_backward": first_bwd,
            "nonfinite_param_grads": bad_grads[:5], "n_nonfinite_param_grads": len(bad_grads),
            "top_grad_norms": dict(top)}


def localize(model: nn.Module, microbatches: list[tuple[torch.Tensor, torch.Tensor]],
             sample_indices: list[list[int]] | None = None, autocast=contextlib.nullcontext) -> dict:
    """Replay microbatches in order; stop at the first one with a non-finite value.

    Returns {"found": bool, "micro": i, "module": first culprit or None, "where": "forward"|"backward"|
    "parameter gradient", "sample_indices": [...], ...the replay details}. With nothing non-finite
    (a spike), it returns the microbatch whose worst sample loss is highest, for the report.
    """
    worst = None
    for i, (x, y) in enumerate(microbatches):
        r = replay_microbatch(model, x, y, autocast)
        r["micro"] = i
        r["sample_indices"] = list(sample_indices[i]) if sample_indices else []
        if r["first_nonfinite_forward"]:
            return {"found": True, "where": "forward", "module": r["first_nonfinite_forward"]["module"], **r}
        if r["first_nonfinite_backward"]:
            return {"found": True, "where": "backward", "module": r["first_nonfinite_backward"]["module"], **r}
        if r["nonfinite_param_grads"]:
            return {"found": True, "where": "parameter gradient", "module": r["nonfinite_param_grads"][0], **r}
        if not r["loss_finite"]:
            return {"found": True, "where": "loss", "module": None, **r}
        if worst is None or max(r["per_sample_loss"]) > max(worst["per_sample_loss"]):
            worst = r
    return {"found": False, "where": None, "module": None, **(worst or {})}
