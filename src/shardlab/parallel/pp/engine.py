"""One engine that runs any schedule: it walks this rank's instruction list and does what each says.

    F       run the stage's forward on the microbatch (the first stage on its tokens, the others on the
            activation received); the last stage scores the logits with the loss function
    B       backward of that microbatch through the stage (from the loss, or from the received gradient)
    I / W   the two halves of B for zero-bubble schedules (see zero_bubble.py)
    SEND_*  hand the activation (F) or the input's gradient (B) to the neighbouring stage, asynchronously
    RECV_*  receive it, blocking until it is there (between two stages of one rank, the V's tip, there
            is no message: the forward takes the stage before's output, detached, as its input, and the
            backward reads that input's gradient back)
    REDUCE  sum the tied embedding's gradient between the first and the last stage; wait for sends
    STEP    nothing here: the optimizer step belongs to the caller (the data-parallel layer steps it)

Sends and receives are posted in the batches of the posting plan (posting.py): one
`batch_isend_irecv` per exchange round, so the order is safe under NCCL's in-order point-to-point as
well as under gloo (the checker, parallel/p2p_order.py, replays this same plan in the tests). A RECV_*
instruction waits for its message; a completed send is let go at the next post (its buffer freed), the
rest are waited for at REDUCE. Point-to-point goes through `comm`, so every transfer is recorded.

`emulate` replaces the model's compute by sleeps of given lengths (forward, backward, and the I / W
halves) while sending real tensors: on a machine with fewer cores than stages, the schedule itself is
then what is timed. A sleep overshoots (by the scheduler's wake-up, more on a loaded machine), so the
emulation also records how long each one really took: the busy time a measured bubble must subtract.

`activations` (an `observe.activations.HeldActivations`) counts, with saved-tensor hooks, the bytes
autograd holds for each microbatch between its forward and its backward, sampled before every compute
instruction and after every forward: the peak is the schedule's activation memory, measured.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from shardlab import comm
from shardlab.observe import timeline
from shardlab.observe.activations import HeldActivations
from shardlab.parallel.pp import posting
from shardlab.parallel.pp.schedule import Schedule
from shardlab.parallel.pp.zero_bubble import WeightGradStore, split_backward
from shardlab.parallel.step import unpack


@dataclass
class Emulation:
    f_s: float
    b_s: float
    i_s: float | None = None
    w_s: float | None = None
    # what the sleeps really took, summed per op since the last reset (op -> [seconds, count])
    spent: dict = field(default_factory=dict)
    # each sleep in the order it ran, (op, start, end) in perf_counter seconds: the rank's own timeline,
    # which a replay of the schedule at the measured durations reads (bench/pipeline.py)
    spans: list = field(default_factory=list)

    def sleep(self, op: str, seconds: float) -> None:
        t0 = time.perf_counter()
        time.sleep(seconds)
        t1 = time.perf_counter()
        got = self.spent.setdefault(op, [0.0, 0])
        got[0] += t1 - t0
        got[1] += 1
        self.spans.append((op, t0, t1))

    def reset(self) -> None:
        self.spent.clear()
        self.spans.clear()


class PipelineEngine:
    def __init__(self, schedule: Schedule, stages: dict[int, nn.Module], stage_rank: Callable[[int], int],
                 pp_rank: int, loss_fn: Callable, act_shape: Callable[[torch.Tensor], tuple],
                 device: torch.device, group=None, embed_group=None, emulate: Emulation | None = None,
                 on_last_backward: Callable[[int], None] | None = None,
                 activations: HeldActivations | None = None):
        """`stages`: this rank's stage modules by stage index; `stage_rank(s)`: the global rank holding
        stage s in this pipeline; `act_shape(x)`: the activation shape of a microbatch of tokens x;
        `embed_group`: the group of the first and last stage's ranks (None when one rank holds both);
        `on_last_backward(s)`: called before a stage's last backward of the step (gradient sync on); it
        may return parameters whose gradients must join that synchronised backward (see `zero_terms`):
        a rank's other virtual stages', or, when that backward is a W, the stage's parameters the I
        halves left behind (LayerNorms, embeddings);
        `activations`: counts the saved tensors each microbatch holds (see the module doc)."""
        self.schedule, self.stages, self.stage_rank = schedule, stages, stage_rank
        self.instrs = schedule.ranks[pp_rank]
        self.before = posting.plan(schedule, pp_rank)  # the batches to post before each instruction
        self.loss_fn, self.act_shape, self.device = loss_fn, act_shape, device
        self.group, self.embed_group, self.emulate = group, embed_group, emulate
        self.on_last_backward = on_last_backward
        self.activations = activations
        self.n_stages = schedule.n_stages
        self.split = any(i.op in ("I", "W") for i in self.instrs)
        self.linears = {s: split_backward(m) for s, m in stages.items()} if self.split and emulate is None else {}
        self._last_bwd = {}  # stage -> index of its last backward instruction (B, or W when split)
        self._mb_done = {}  # microbatch -> index of its last compute on this rank (its backward there is done)
        for k, ins in enumerate(self.instrs):
            if ins.op in ("B", "W"):
                self._last_bwd[ins.stage] = k
            if ins.op in ("B", "I", "W"):
                self._mb_done[ins.mb] = k
        self._mb_done = {k: mb for mb, k in self._mb_done.items()}  # instruction index -> microbatch

    # --- one step ---------------------------------------------------------------------------------------
    def step(self, microbatches: list[tuple[torch.Tensor, ...]], loss_weight: float,
             after_microbatch: Callable[[int, torch.Tensor | None], None] | None = None) -> torch.Tensor:
        """Run the schedule on `microbatches` [(x, y)] or [(x, y, doc_pos)] (packed documents: every stage's
        forward of microbatch m takes its doc_pos, the pipeline's side input, which every rank has from the
        batch: it never travels between stages nor is it recomputed from hidden states); returns the
        summed (unweighted) loss of this rank's last-stage microbatches (zero on other ranks). Gradients
        are left accumulated in the stages. `after_microbatch(m, loss)` is called once microbatch m's last
        backward on this rank ran (its B, or W when split, of the rank's lowest stage), `loss` its
        summed (unweighted) loss when this rank holds the last stage, else None."""
        assert len(microbatches) == self.schedule.microbatches, "one (x, y) per scheduled microbatch"
        inputs, outputs, grads, stores, sends = {}, {}, {}, {}, []
        self.losses = {}  # microbatch -> its summed loss (the last stage's rank only)
        loss_sum = torch.zeros((), device=self.device)
        posted: dict[int, tuple] = {}  # receive instruction index -> (handle, buffer)
        held = self.activations if self.emulate is None else None
        for k, ins in enumerate(self.instrs):
            key = (ins.stage, ins.mb)
            x, y, side = unpack(microbatches[ins.mb]) if ins.mb >= 0 else (None, None, {})
            for batch in self.before[k]:
                sends = _reap(sends)
                sends += self._post(batch, microbatches, inputs, outputs, posted)
            if held is not None and ins.op in ("F", "B", "I", "W"):
                held.sample()
            if ins.op == "RECV_F":
                inputs[key] = _take(posted, k).requires_grad_(self.emulate is None)
            elif ins.op == "RECV_B":
                grads[key] = _take(posted, k)
            elif ins.op in ("SEND_F", "SEND_B"):
                pass  # posted with its round's batch (self.before), right after the compute that made it
            elif ins.op == "F":
                if ins.stage > 0 and self.schedule.local(ins.stage, ins.stage - 1):
                    # the V's tip: the stage before is on this rank; its output is this stage's input, cut
                    # from its graph as a received one is (its gradient is read back at the backward below)
                    inputs[key] = outputs[(ins.stage - 1, ins.mb)].detach().requires_grad_(self.emulate is None)
                with timeline.span("forward", cat="compute", micro=ins.mb, stage=ins.stage), \
                        (held.saving(key) if held is not None else contextlib.nullcontext()):
                    # side inputs (packed documents' positions) reach every stage from the batch itself
                    outputs[key] = self._forward(ins.stage, x if ins.stage == 0 else inputs[key], stores, key, side)
                    if ins.stage == self.n_stages - 1 and self.emulate is None:
                        outputs[key] = self._score(outputs[key], y, loss_weight, loss_sum, ins.mb)
                if held is not None:
                    held.sample()
            elif ins.op in ("B", "I"):
                if ins.stage < self.n_stages - 1 and self.schedule.local(ins.stage, ins.stage + 1):
                    grads[key] = _input_grad(inputs.pop((ins.stage + 1, ins.mb)))  # handed over on the rank
                extra = None
                if self._last_bwd.get(ins.stage) == k and self.on_last_backward is not None:
                    extra = self.on_last_backward(ins.stage)
                if key in stores:  # recompute reruns the forward in here: its GEMMs go to this microbatch
                    self._point(ins.stage, stores[key])
                    if ins.op == "B":  # a whole B in a split schedule: weights in it too
                        stores.pop(key).full = True
                with timeline.span("backward" if ins.op == "B" else "backward_input", cat="compute",
                                   micro=ins.mb, stage=ins.stage):
                    self._backward(ins.op, outputs.pop(key), grads.pop(key, None), zero_terms(extra or ()))
            elif ins.op == "W":
                extra = None
                if self._last_bwd.get(ins.stage) == k and self.on_last_backward is not None:
                    extra = self.on_last_backward(ins.stage)
                with timeline.span("backward_weight", cat="compute", micro=ins.mb, stage=ins.stage):
                    if self.emulate is not None:
                        self.emulate.sleep("W", self.emulate.w_s if self.emulate.w_s is not None
                                           else self.emulate.b_s / 2)
                    else:
                        store = stores.pop(key)
                        store.run(zero_terms(extra or (), skip=store.params()))
            elif ins.op == "REDUCE":
                for h in sends:
                    h.wait()
                sends.clear()
                self._reduce_tied()
            if after_microbatch is not None and k in self._mb_done:
                after_microbatch(ins.mb, self.losses.get(ins.mb))
        return loss_sum

    # --- point to point ---------------------------------------------------------------------------------
    def _post(self, batch, microbatches, inputs, outputs, posted) -> list:
        """One batch of the posting plan as one batch_isend_irecv; returns the sends' handles."""
        ops, kinds = [], []
        for j in batch:
            ins = self.instrs[j]
            key, peer, tag = (ins.stage, ins.mb), self.stage_rank(ins.peer), posting.label(ins)
            if ins.op == "SEND_F":
                ops.append(comm.P2POp(comm.isend, outputs[key].detach(), peer, self.group, tag))
            elif ins.op == "SEND_B":
                # the received activation is dropped here (no local keeps it): only its gradient travels on
                ops.append(comm.P2POp(comm.isend, _input_grad(inputs.pop(key)), peer, self.group, tag))
            else:
                buf = torch.empty(self.act_shape(microbatches[ins.mb][0]), device=self.device)
                ops.append(comm.P2POp(comm.irecv, buf, peer, self.group, tag))
            kinds.append(ins.op)
        handles = comm.batch_isend_irecv(ops)
        sends = []
        for j, op, kind, h in zip(batch, ops, kinds, handles):
            if kind.startswith("SEND"):
                sends.append(h)
            else:
                posted[j] = (h, op.tensor)
        return sends

    # --- the compute instructions -----------------------------------------------------------------------
    def _score(self, logits: torch.Tensor, y: torch.Tensor, loss_weight: float, loss_sum: torch.Tensor, mb: int):
        """The last stage's loss, weighted: the root its backward starts from (added to loss_sum too)."""
        loss = self.loss_fn(logits, y)
        self.losses[mb] = loss.detach()
        loss_sum += loss.detach()
        return loss * loss_weight

    def _forward(self, stage: int, inp: torch.Tensor, stores: dict, key, side: dict) -> torch.Tensor:
        if self.emulate is not None:
            self.emulate.sleep("F", self.emulate.f_s)
            return torch.zeros(self.act_shape(inp) if stage == 0 else inp.shape, device=self.device)
        if self.split:  # the microbatch's I will queue its weight GEMMs here for its W
            stores[key] = WeightGradStore()
            self._point(stage, stores[key])
        return self.stages[stage](inp, **side)

    def _point(self, stage: int, store: WeightGradStore) -> None:
        """The stage's split Linears queue into `store`: set before a microbatch's forward, and again before
        its I, whose recompute (train.recompute) runs the forward anew while a later microbatch's store is set."""
        for lin in self.linears.get(stage, ()):
            lin.store = store

    def _backward(self, op: str, out: torch.Tensor, grad: torch.Tensor | None, extra: list | None = None) -> None:
        if self.emulate is not None:
            e = self.emulate
            e.sleep(op, e.b_s if op == "B" else (e.i_s if e.i_s is not None else e.b_s / 2))
            return
        if extra:
            grad = torch.ones_like(out) if grad is None else grad  # the loss: d(loss)/d(loss) = 1
            torch.autograd.backward([out, *extra], [grad, *(torch.ones_like(t) for t in extra)])
            return
        torch.autograd.backward(out, grad)

    def _reduce_tied(self) -> None:
        """The first stage's embedding and the last stage's head are one parameter held twice: add the
        two gradients so both copies take the same step."""
        if self.embed_group is None or self.emulate is not None:
            return
        for s in (0, self.n_stages - 1):
            if s in self.stages and self.stages[s].wte is not None:
                g = self.stages[s].wte.weight.grad
                if g is None:
                    g = self.stages[s].wte.weight.grad = torch.zeros_like(self.stages[s].wte.weight)
                comm.all_reduce(g, group=self.embed_group, tag="tied embedding grad")


def zero_terms(params, skip=()) -> list[torch.Tensor]:
    """One zero-weight scalar per parameter whose gradient the data-parallel layer still holds unreduced
    (a layer that reduced it already has set `.grad` to None), except those in `skip` (which the backward
    computes anyway: one parameter twice in a synchronised backward is an error for ddp). Backpropagated
    along with a stage's last backward they add exact zeros and fire the layer's gradient hooks, so the
    layer reduces those gradients in that one synchronised backward."""
    skip = {id(p) for p in skip}
    return [p.sum() * 0.0 for p in params if p.grad is not None and id(p) not in skip]


def _input_grad(inp: torch.Tensor) -> torch.Tensor:
    return inp.grad if inp.grad is not None else torch.zeros_like(inp)  # emulation computes none


def _reap(sends: list) -> list:
    """Sends still in flight; the completed ones are waited for (recorded as done) and let go, so a sent
    activation's buffer is freed once it has left rather than at the end of the step. (Only completed
    ones: waiting here for one in flight would add an order the posting plan's proof does not cover.)"""
    pending = []
    for h in sends:
        if h.is_completed():
            h.wait()
        else:
            pending.append(h)
    return pending


def _take(posted: dict, k: int) -> torch.Tensor:
    """The message of receive instruction k, once it is there."""
    handle, buf = posted.pop(k)
    handle.wait()
    return buf
