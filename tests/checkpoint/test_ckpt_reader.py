"""The direct reader's building blocks, in one process: chunked hashing and the two-read zip parse."""
import io
import os

import torch

from shardlab.checkpoint import manifest as mf
from shardlab.checkpoint import walk, zip_items


def test_chunked_hashing_hashes_every_byte_once_in_order(tmp_path, monkeypatch):
    # A chunk smaller than the views and not dividing them: the chunk loop's edges are exercised.
    monkeypatch.setattr(walk, "HASH_CHUNK", 7)
    data = os.urandom(1000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    hasher = mf.new_hasher()
    with open(path, "rb", buffering=0) as f:
        w = walk.Walk(f, hasher)
        w.skip_to(13)
        view = memoryview(bytearray(500))
        w.readinto(view)
        w.finish()
    want = mf.new_hasher()
    want.update(data)
    assert bytes(view) == data[13:513] and w.pos == len(data)
    assert hasher.hexdigest() == want.hexdigest()


def test_record_span_finds_the_tensor_bytes_of_a_large_and_a_small_item(tmp_path):
    # Large: data.pkl in the first read, the central directory in the last, the data between them.
    for n in (5, 100_000):
        t = torch.arange(n, dtype=torch.float32)
        buf = io.BytesIO()
        torch.save(t, buf)
        blob = b"x" * 37 + buf.getvalue()  # the item sits at an offset inside its shard file, as in DCP's
        path = tmp_path / f"item{n}.bin"
        path.write_bytes(blob)
        fd = os.open(path, os.O_RDONLY)
        try:
            at = zip_items.record_span(fd, 37, len(blob) - 37, torch.empty(n))
        finally:
            os.close(fd)
        assert at is not None
        assert blob[37 + at:37 + at + 4 * n] == t.numpy().tobytes()


def test_record_span_from_the_head_agrees_with_the_central_directory(tmp_path):
    # The one-read parse (the records before the storage) and the central directory's give the same
    # place for tensors of several dtypes and shapes; a mismatching target is refused by both.
    for t in (torch.arange(3, dtype=torch.int64), torch.randn(7, 5), torch.randn(2, 3, 4).to(torch.bfloat16),
              torch.zeros(0), torch.randn(300_000)):
        buf = io.BytesIO()
        torch.save(t, buf)
        blob = b"y" * 11 + buf.getvalue()
        path = tmp_path / "item.bin"
        path.write_bytes(blob)
        fd = os.open(path, os.O_RDONLY)
        try:
            n = len(blob) - 11
            nbytes = t.numel() * t.element_size()
            at = zip_items.record_span(fd, 11, n, torch.empty_like(t))
            assert at is not None and at == zip_items._central_span(fd, 11, n, t.dtype, tuple(t.shape), t.numel())
            assert zip_items._head_records(os.pread(fd, 4096, 11)) is not None  # the one-read path was taken
            assert blob[11 + at:11 + at + nbytes] == t.contiguous().view(torch.uint8).numpy().tobytes()
            assert zip_items.record_span(fd, 11, n, torch.empty(t.numel() + 1, dtype=t.dtype)) is None
        finally:
            os.close(fd)


def test_state_names_rebuild_what_torch_gives(tmp_path):
    # The cached names (parallel/dp/sd_names.py) give torch's state dicts: the same names in the same
    # order, views of the same parameters, the optimizer's own state tensors, equal hyperparameters; a
    # replaced parameter or new optimizer state makes them ask torch again.
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    from shardlab.parallel.dp import sd_names

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW([{"params": list(model[0].parameters())}, {"params": list(model[1:].parameters()),
                                                                       "weight_decay": 0.0}], lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    names = sd_names.StateNames()
    for _ in range(2):  # the first computes with torch, the second rebuilds
        m = names.model(model, lambda: get_model_state_dict(model))
        o = names.optim(model, opt, lambda: get_optimizer_state_dict(model, opt))
    assert names._model is not None and names._optim is not None
    want_m, want_o = get_model_state_dict(model), get_optimizer_state_dict(model, opt)
    assert list(m) == list(want_m) and all(m[k].data_ptr() == want_m[k].data_ptr() for k in m)
    assert list(o["state"]) == list(want_o["state"]) and o["param_groups"] == want_o["param_groups"]
    assert all(o["state"][k][n] is v for k, st in want_o["state"].items() for n, v in st.items())
    opt.param_groups[0]["lr"] = 5e-4  # hyperparameters are read live
    assert names.optim(model, opt, lambda: 1 / 0)["param_groups"][0]["lr"] == 5e-4  # (1 / 0: not asked)
    model[0].weight = torch.nn.Parameter(torch.randn(3, 4))  # a new tensor: torch is asked again
    asked = []
    names.model(model, lambda: asked.append(1) or get_model_state_dict(model))
    assert asked == [1]


def test_plain_value_agrees_with_torch_load_and_refuses_the_rest():
    # The bytes items a load reads itself (the hyperparameters) give what torch.load gives (DCP's load_bytes);
    # anything holding a torch type, a storage or a class to import is left to torch.load.
    import collections

    for v in (0.1, (0.9, 0.95), None, True, 3, "x", ["a.b", "c"], {"k": [1, 2.5]}):
        buf = io.BytesIO()
        torch.save(v, buf)
        assert zip_items.plain_value(buf.getvalue()) == (True, torch.load(io.BytesIO(buf.getvalue()), weights_only=False))
    for v in (torch.ones(2), collections.OrderedDict(a=1), torch.float32):
        buf = io.BytesIO()
        torch.save(v, buf)
        assert zip_items.plain_value(buf.getvalue()) == (False, None)
    assert zip_items.plain_value(b"not a zip") == (False, None)


def _tensors_of(opt) -> list:
    return [id(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]


def _tensors_of_sd(sd) -> list:
    return [id(v) for st in sd["state"].values() for v in st.values() if torch.is_tensor(v)]


def test_in_place_checks_take_the_live_state_only():
    # parallel/dp/in_place.py: a state dict that is the live tensors is applied by doing nothing (model) or by
    # torch's load with the optimizer's own state (optimizer); a copy takes torch's path as before.
    from shardlab.parallel.dp import in_place
    from shardlab.parallel.dp.sd_names import _model_signature, _tensors

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    assert _tensors(model) == list(model.parameters()) + list(model.buffers())
    assert _model_signature(model) is not None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    live = {k: v.detach() for k, v in model.state_dict().items()}
    assert in_place.model_loaded_in_place(model, live)
    assert not in_place.model_loaded_in_place(model, {k: v.clone() for k, v in live.items()})
    sd = opt.state_dict()
    native = in_place.native_optim_state(opt, sd)
    assert native is not None and native["state"].keys() == sd["state"].keys()
    copied = {**sd, "state": {k: {n: v.clone() for n, v in st.items()} for k, st in sd["state"].items()}}
    assert in_place.native_optim_state(opt, copied) is None
    views = {**sd, "state": {k: {n: v.view(v.shape) for n, v in st.items()} for k, st in sd["state"].items()}}
    assert in_place.native_optim_state(opt, views) is not None  # other objects, the same memory
    newer = in_place.native_optim_state(opt, {**sd, "param_groups": [{**sd["param_groups"][0], "lr": 5e-4}]})
    opt.load_state_dict(newer)  # the checkpoint's hyperparameters, around the live state tensors
    assert opt.param_groups[0]["lr"] == 5e-4 and _tensors_of(opt) == _tensors_of_sd(sd)


def _adamw(model, cls=torch.optim.AdamW, **kw):
    return cls([{"params": list(model[0].parameters())},
                {"params": list(model[1:].parameters()), "weight_decay": 0.0}], lr=1e-3, **kw)


def _adamw_after_a_step(**kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
    opt = _adamw(model, **kw)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return model, opt


def _optim_snapshot(opt):
    return ([(list(g), g) for g in opt.param_groups], [(p, list(st.items())) for p, st in opt.state.items()],
            type(opt.state), dict(opt.defaults))


def test_optimizer_load_in_place_builds_what_torch_builds():
    # in_place.load_optim_in_place skips torch's pack / unpack of the optimizer's own state dict when nothing
    # can differ: the param groups (equal dicts, the same keys in the same order, the live params lists) and
    # the state (the same parameters in the same order, new per-parameter dicts holding the very same
    # tensors) are those torch's Optimizer.load_state_dict builds, in a real resume's case (the live lr
    # differs from the checkpoint's); hooks, another fused / foreach, a tensor hyperparameter take torch's.
    from shardlab.parallel.dp import in_place

    def saved(opt, **changes):  # the checkpoint's hyperparameters (DCP's format: params by name)
        return {"state": {f"p{i}": st for i, st in enumerate(opt.state.values())},
                "param_groups": [{**{k: v for k, v in g.items() if k != "params"}, **changes,
                                  "params": [f"p{i}" for i in range(len(g["params"]))]} for g in opt.param_groups]}

    calls = []
    torch_load = torch.optim.Optimizer.load_state_dict

    def counted(self, sd):
        calls.append(1)
        return torch_load(self, sd)

    for kw in ({}, {"foreach": False}, {"amsgrad": True}, {"fused": True}):
        model, ref = _adamw_after_a_step(**kw)
        opt = _adamw(model, **kw)
        opt.state = ref.state  # the same state tensors: one was loaded in place into the other's live state
        for o in (ref, opt):
            o.param_groups[0]["lr"] = 0.5  # a fresh optimizer's lr; the checkpoint's is 1e-3
        sd = saved(ref, lr=1e-3)
        old = {p: st for p, st in ref.state.items()}
        lists = [[g["params"] for g in o.param_groups] for o in (ref, opt)]
        ref.load_state_dict(in_place.native_optim_state(ref, sd))  # torch's
        torch.optim.Optimizer.load_state_dict = counted
        try:
            assert in_place.load_optim_in_place(opt, saved(opt, lr=1e-3))
        finally:
            torch.optim.Optimizer.load_state_dict = torch_load
        assert calls == [], kw  # the direct path was taken
        (gr, st, kind, dflt), (go, so, kind2, dflt2) = _optim_snapshot(ref), _optim_snapshot(opt)
        assert [k for k, _ in gr] == [k for k, _ in go] and [g for _, g in gr] == [g for _, g in go]
        assert [[g["params"] for g in o.param_groups] for o in (ref, opt)] == lists  # the live lists
        assert all(a is b for o, ls in zip((ref, opt), lists) for a, b in zip(ls, [g["params"] for g in o.param_groups]))
        assert opt.param_groups[0]["lr"] == 1e-3 and kind is kind2 and dflt == dflt2
        assert [p for p, _ in st] == [p for p, _ in so]
        assert all([k for k, _ in a] == [k for k, _ in b] and all(x is y for (_, x), (_, y) in zip(a, b))
                   for (_, a), (_, b) in zip(st, so))
        assert all(opt.state[p] is not old[p] for p in old)  # new per-parameter dicts, as torch's

    # Where torch's load may do something else, it is torch's load that runs.
    def takes_torch(opt, sd):
        torch.optim.Optimizer.load_state_dict = counted
        try:
            calls.clear()
            assert in_place.load_optim_in_place(opt, sd)
        finally:
            torch.optim.Optimizer.load_state_dict = torch_load
        return calls == [1]

    _, opt = _adamw_after_a_step()
    assert takes_torch(opt, saved(opt, foreach=True))
    assert takes_torch(opt, saved(opt, lr=torch.tensor(1e-3)))
    opt.register_load_state_dict_post_hook(lambda o: None)
    assert takes_torch(opt, saved(opt))
    _, opt = _adamw_after_a_step()
    opt.param_groups[0]["params"][0].data = opt.param_groups[0]["params"][0].data.double()  # a cast to make
    assert takes_torch(opt, saved(opt))

    class Custom(torch.optim.AdamW):
        def __setstate__(self, state):
            super().__setstate__(state)

    model, ref = _adamw_after_a_step()
    opt = _adamw(model, Custom)
    opt.state = ref.state
    assert takes_torch(opt, saved(opt))
    copied = {**saved(opt), "state": {k: {n: v.clone() for n, v in st.items()} for k, st in saved(opt)["state"].items()}}
    assert not in_place.load_optim_in_place(opt, copied)  # not the live state: the caller's (DCP's) path
