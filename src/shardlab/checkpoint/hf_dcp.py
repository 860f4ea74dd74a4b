"""Hugging Face safetensors through DCP, under any layout: `ckpt.format=hf` saves and `ckpt.init_from=HF_DIR`.

A sharded run's parameters are DTensors (or plain tensors) under shardlab's names; a Hugging Face model is
full tensors under the family's names, some of them transposed (GPT-2's Conv1D stores linear weights
(in, out)) or fused (GPT-2's c_attn is q, k, v concatenated). Rather than gathering anything, each rank
describes the HF tensors by the pieces it holds: its local shard of a shardlab tensor is a rectangle of
the HF tensor (shifted by the fused part's rows, then transposed where HF transposes). `HFTensor` gives DCP
exactly that (its chunk protocol, as DTensor implements it), so

- saving: every rank writes its own pieces with DCP's `HuggingFaceStorageWriter` (sharded files, one per
  rank, several where a rank holds more than one piece of one HF tensor: a safetensors file keys each
  tensor once), replicated pieces deduplicated by DCP; rank 0 then consolidates them into the model's
  `model-00001-of-00001.safetensors` + `model.safetensors.index.json` (DCP's consolidation), adds
  `config.json` and the tokenizer files (hf.py's, as `ckpt export --hf` writes them) and removes the shards;
- loading: every rank asks DCP's `HuggingFaceStorageReader` for its pieces only; the reader memory-maps
  the files and copies each requested slice straight into the rank's tensors (through a transposed view
  where HF transposes): no rank reads bytes it does not hold, and nothing goes through a full tensor.

The name table is the anatomy's (model/anatomy.py), the one `ckpt export/import --hf` read: the same
tensors land under the same names.
"""
from __future__ import annotations

import collections
import queue
import warnings
from pathlib import Path

import torch
from torch.distributed.checkpoint import (DefaultLoadPlanner, DefaultSavePlanner, FileSystemWriter,
                                         HuggingFaceStorageReader, HuggingFaceStorageWriter)
from torch.distributed.checkpoint._hf_utils import _gen_file_name
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

from shardlab.model import anatomy


class HFTensor:
    """One Hugging Face tensor as the pieces of it this rank holds: [(offsets in the HF tensor, tensor)].
    Implements DCP's chunk protocol (`__create_write_items__`, `__create_chunk_list__`,
    `__get_tensor_shard__`), so DCP plans, writes and reads it like a sharded tensor."""

    def __init__(self, size: tuple, dtype: torch.dtype, pieces: list[tuple[tuple, torch.Tensor]]):
        self._size, self.dtype, self.pieces = torch.Size(size), dtype, pieces

    def size(self) -> torch.Size:
        return self._size

    def __create_write_items__(self, fqn: str, obj) -> list[WriteItem]:
        props = TensorProperties(dtype=self.dtype)
        return [WriteItem(index=MetadataIndex(fqn, torch.Size(o)), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(torch.Size(o), t.size()),
                                                      properties=props, size=self._size))
                for o, t in self.pieces]

    def __create_chunk_list__(self) -> list[ChunkStorageMetadata]:
        return [ChunkStorageMetadata(offsets=torch.Size(o), sizes=t.size()) for o, t in self.pieces]

    def __get_tensor_shard__(self, index: MetadataIndex) -> torch.Tensor:
        for o, t in self.pieces:
            if torch.Size(o) == index.offset:
                return t
        raise ValueError(f"{index.fqn}: this rank holds no piece at {list(index.offset)}")


class SavePlanner(DefaultSavePlanner):
    """DCP's planner, finding an HFTensor's pieces (DCP looks up shards only in torch.Tensor values)."""

    def lookup_object(self, index: MetadataIndex):
        obj = self.state_dict[index.fqn]
        return obj.__get_tensor_shard__(index) if isinstance(obj, HFTensor) else super().lookup_object(index)


class LoadPlanner(DefaultLoadPlanner):
    def set_up_planner(self, state_dict, metadata=None, is_coordinator: bool = False) -> None:
        # DCP's meta-device pass (_init_state_dict) replaces values it does not know by None, in place: put
        # the HFTensors back (the dict is flat already: flattening leaves it as it is).
        views = dict(state_dict)
        super().set_up_planner(state_dict, metadata, is_coordinator)
        state_dict.update(views)
        self.state_dict = views

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        obj = self.state_dict[index.fqn]
        return obj.__get_tensor_shard__(index) if isinstance(obj, HFTensor) else super().lookup_tensor(index)


def names(anat, n_layer: int, tied: bool) -> dict[str, tuple[str, tuple[str, ...], bool]]:
    """shardlab name -> (its HF name, the parts fused into that HF tensor in order, transposed there).
    The head is left out when tied (HF ties it to the embedding); export_tensors' table (hf.py)."""
    head = anat.weight(anat.head)
    out = {ours: (theirs, (ours,), False) for ours, theirs in anat.hf_top.items() if not (tied and ours == head)}
    kinds = ("weight", "bias") if anat.bias else ("weight",)
    for i in range(n_layer):
        b, h = anat.block(i), f"{anat.hf_block_prefix}.{i}"
        for ours, theirs in anat.hf_block.items():
            parts = anat.fused.get(ours, (ours,))
            for kind in kinds:
                transpose = kind == "weight" and anat.hf_transposed and not anat.is_norm(ours)
                fused = tuple(f"{b}.{z}.{kind}" for z in parts)
                for z in fused:
                    out[z] = (f"{h}.{theirs}.{kind}", fused, transpose)
    return out


def _local_pieces(value) -> list[tuple[tuple, torch.Tensor]]:
    """(global offsets, local tensor) of what this rank holds of a state-dict value (a DTensor's shard, or
    a whole plain tensor); none for a DTensor on a mesh this rank is not part of."""
    if hasattr(value, "__create_chunk_list__"):  # DTensor
        if value.device_mesh.get_coordinate() is None:
            return []
        local = value.to_local()
        return [(tuple(c.offsets), local) for c in value.__create_chunk_list__() if local.numel()]
    return [((0,) * value.dim(), value)]


def hf_state(sd: dict, model_cfg, for_write: bool) -> dict[str, HFTensor]:
    """This rank's model state dict (`strategy.model_state_dict()`) as HFTensors under HF names. For
    writing the pieces are contiguous copies where HF transposes (safetensors writes contiguous bytes); for
    reading they are views of the rank's own tensors, which DCP fills in place."""
    anat = anatomy.of(model_cfg)
    tied = bool(getattr(model_cfg, "tie_embeddings", anat.arch == "gpt2"))
    table = names(anat, model_cfg.n_layer, tied)
    unnamed = [k for k, v in sd.items() if k not in table and torch.is_tensor(v)
               and not (tied and k == anat.weight(anat.head))]
    if unnamed:
        raise ValueError(f"ckpt.format=hf: the model's {unnamed[0]!r} has no Hugging Face name "
                         f"({anat.arch}'s table: model/anatomy.py); save it as dcp")
    out: dict[str, HFTensor] = {}
    for ours, (theirs, fused, transpose) in table.items():
        if ours not in sd:  # another pipeline stage holds it
            continue
        value = sd[ours]
        shift = sum(sd[z].shape[0] for z in fused[:fused.index(ours)])  # the part's first row in the fused tensor
        rows = sum(sd[z].shape[0] for z in fused)
        size = (rows, *value.shape[1:])
        pieces = []
        for o, t in _local_pieces(value):
            o = (o[0] + shift, *o[1:])
            if transpose:
                o, t = (o[1], o[0]), t.t()
            pieces.append((o, t.contiguous() if for_write else t.detach()))
        size = (size[1], size[0]) if transpose else size
        if theirs in out:
            out[theirs].pieces += pieces
        else:
            out[theirs] = HFTensor(size, value.dtype, pieces)
    return out


class Writer(HuggingFaceStorageWriter):
    """DCP's HF writer (sharded, then consolidated by rank 0), writing a rank's pieces of one HF tensor to
    separate files: DCP's writer puts all of a rank's items in one safetensors file, which keys a tensor
    once, and a rank holds several pieces of a fused tensor (q, k and v of GPT-2's c_attn)."""

    def __init__(self, path: Path):
        super().__init__(str(path), save_distributed=True, enable_consolidation=True)

    def write_data(self, plan, planner):
        if not plan.items:
            return super().write_data(plan, planner)
        files: dict[int, list] = {}
        seen: collections.Counter = collections.Counter()
        for item in plan.items:  # the k-th piece of every tensor goes to file k
            seen[item.index.fqn] += 1
            files.setdefault(seen[item.index.fqn], []).append(item)
        pending: queue.Queue = queue.Queue()
        for k, items in files.items():
            name = _gen_file_name(k, len(files), plan.storage_data.get("shard_index"))
            pending.put((self.fs.concat_path(self.path, name), name, items))
        return FileSystemWriter._write_data(self, planner, pending)


def reader(hf_dir: Path, threads: int = 4) -> HuggingFaceStorageReader:
    """DCP's HF reader: the tensors of every *.safetensors file in `hf_dir`, read by slice (memory-mapped),
    one thread per file up to `threads`."""
    return HuggingFaceStorageReader(str(hf_dir), thread_count=threads)


def match_prefix(views: dict[str, HFTensor], available, prefix: str) -> dict[str, HFTensor]:
    """GPT-2's weights saved by GPT2Model (no head) lack the `transformer.` prefix the export writes."""
    if not prefix or all(k in available for k in views):
        return views
    return {k.removeprefix(prefix) if k not in available else k: v for k, v in views.items()}


def save(mgr, state) -> Path | None:
    """`ckpt.format=hf`: the model of step `state.step` as RUN/hf/step_NNNNNN (every rank; a collective).
    Written as `.tmp` and renamed when complete, as a DCP checkpoint is; the last `ckpt.keep` are kept.
    Returns the directory, or None when the save failed (recorded like a failed DCP save; training goes on)."""
    import dataclasses
    import json
    import shutil

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    from shardlab import comm
    from shardlab.checkpoint import hf, manifest as mf

    root = mgr.run_dir / "hf"
    final = root / mf.step_dirname(int(state.step))
    tmp = final.with_name(final.name + ".tmp")
    if mgr.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    comm.barrier(mgr.pg)
    model_cfg = model_config(state)
    error = None
    try:
        views = hf_state(state.strategy.model_state_dict(), model_cfg, for_write=True)
        dcp.save(views, storage_writer=Writer(tmp), planner=SavePlanner(), process_group=mgr.pg,
                 no_dist=not comm.is_initialized())
    except (Exception, CheckpointException) as e:  # noqa: BLE001 (any failure abandons this save, never the run)
        error = f"rank {mgr.rank}: {type(e).__name__}: {e}"
    errors = [e for e in comm.all_gather_object(error, group=mgr.pg) if e is not None]
    outcome = None
    if mgr.rank == 0:
        try:
            if errors:
                raise RuntimeError(errors[0])
            shutil.rmtree(tmp / "sharded")  # consolidated into the model's files
            model = dataclasses.asdict(model_cfg)
            config = hf.llama_hf_config(model) if model.get("arch") == "llama" else hf.hf_config(model)
            hf.write_tokenizer(tmp, tmp, model, config)  # the run's tokenizer (RUN/tokenizer)
            (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
            mf.fsync_dir(root)
            _prune(root, mgr.ccfg.keep)
        except Exception as e:  # noqa: BLE001
            shutil.rmtree(tmp, ignore_errors=True)
            outcome = f"Hugging Face save at step {state.step} abandoned: {e}; training continues"
    return comm.broadcast_object(outcome, group=mgr.pg), final


def _prune(root: Path, keep: int) -> None:
    """The last `keep` HF saves stay (0: all)."""
    import shutil

    done = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".tmp"))
    for p in done[:-keep] if keep else []:
        shutil.rmtree(p, ignore_errors=True)


def load(hf_dir: Path, state) -> None:
    """`ckpt.init_from=HF_DIR`: the directory's weights into this rank's parameters, whatever the layout:
    each rank reads only the slices it holds (cast to the run's dtype as they are copied in)."""
    import torch.distributed.checkpoint as dcp

    strategy, model_cfg = state.strategy, model_config(state)
    sd = strategy.model_state_dict()
    views = hf_state(sd, model_cfg, for_write=False)
    rd = reader(hf_dir)
    available = rd.read_metadata().state_dict_metadata
    views = match_prefix(views, available, anatomy.of(model_cfg).hf_prefix)
    missing = sorted(set(views) - set(available))
    if missing:
        from shardlab.checkpoint.resume_path import CheckpointError
        raise CheckpointError(f"ckpt.init_from={hf_dir}: the weights have no tensor {missing[0]!r} (config.json's "
                              "model needs it)")
    with warnings.catch_warnings():  # each rank plans alone (no_dist), as loading.py's reads do
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(views, storage_reader=rd, planner=LoadPlanner(), no_dist=True)
    strategy.load_model_state_dict(sd)


def model_config(state):
    """The run's model config (a pipeline stage keeps the whole model's)."""
    cfg = getattr(state.strategy.model, "cfg", None)
    if cfg is None:
        from shardlab.model.configs import resolve_model_config
        cfg = resolve_model_config(state.cfg.model, state.cfg.train.seq_len)
    return cfg
