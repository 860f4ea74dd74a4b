"""Documents of a source, for tokenizers that are not bytes: what `bpe:N` trains on, what `data prepare`
and the `stdlib` / `text:` sources encode.

    stdlib                   every standard-library *.py file (stdlib_files), one document each
    text:PATH / PATH         a file or a folder (recursive, sorted paths, hidden files skipped); each file by
                             its suffix: .jsonl (one document per line, its `text` field or --field),
                             .parquet and .arrow (one per row, the same field), anything else one text document
    PATH (a saved dataset)   a Hugging Face `datasets` directory written by `save_to_disk` (its arrow files,
                             read with pyarrow: `datasets` itself is not needed); a DatasetDict's `train` split

Documents come in a fixed order (sorted paths, then rows in file order): the same corpus every time.
`fingerprint` names a source's files by path, size and modification time (a changed file changes it).
"""
from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path
from typing import Iterator

from .errors import DataError

TEXT_FIELD = "text"
TABLE_SUFFIXES = (".parquet", ".arrow")
# Test suites are ~60% of the stdlib's bytes and full of deliberately odd inputs (encoding torture
# tests, generated tables, invalid syntax): noise for a model of Python code. The rest (~12 MB on
# 3.11) is far more than a few hundred steps can use, and skipping them halves the first build.
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}


def stdlib_files() -> list[Path]:
    """The stdlib's *.py files in sorted path order (the order is part of the corpus)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in STDLIB_SKIP_DIRS]
        files += [Path(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(files)


def is_text(path: Path) -> bool:
    """Heuristic used by `git` and `grep`: a NUL byte near the start means binary."""
    with open(path, "rb") as f:
        return b"\0" not in f.read(8192)


def source_path(source: str) -> Path | None:
    """The path a source names (`text:PATH` or a bare PATH), or None for `stdlib`."""
    if source == "stdlib":
        return None
    return Path(source[5:] if source.startswith("text:") else source)


def files_of(source: str) -> list[Path]:
    """The files a source reads, in corpus order."""
    p = source_path(source)
    if p is None:
        return stdlib_files()
    if dataset_dir(p) is not None:
        return dataset_files(dataset_dir(p))
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise DataError(f"source {p} does not exist; give a text, .jsonl or .parquet file, a folder, or a "
                        "saved Hugging Face dataset directory")
    files = sorted(f for f in p.rglob("*") if f.is_file() and not any(
        part.startswith(".") for part in f.relative_to(p).parts))
    files = [f for f in files if f.suffix in (".jsonl", *TABLE_SUFFIXES) or is_text(f)]
    if not files:
        raise DataError(f"source folder {p} has no text, .jsonl, .parquet or .arrow files")
    return files


def fingerprint(source: str, field: str = TEXT_FIELD) -> str:
    """sha256 over the files' paths, sizes and mtimes, and the field read (cheap: stat only)."""
    h = hashlib.sha256(f"{source}\0{field}".encode())
    for f in files_of(source):
        st = f.stat()
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def documents(source: str, field: str = TEXT_FIELD) -> Iterator[tuple[str, str]]:
    """(name, text) of every document of the source, in order."""
    for f in files_of(source):
        if f.suffix == ".jsonl":
            yield from _jsonl(f, field)
        elif f.suffix in TABLE_SUFFIXES:
            yield from _table(f, field)
        else:
            yield str(f), f.read_bytes().decode("utf-8", errors="replace")


def _jsonl(f: Path, field: str) -> Iterator[tuple[str, str]]:
    with open(f, encoding="utf-8") as lines:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise DataError(f"{f}:{n}: not a JSON object; a .jsonl source has one JSON object per line") from None
            text = record.get(field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise DataError(f"{f}:{n}: no string field {field!r}; name the text field with --field")
            yield f"{f}:{n}", text


def _table(f: Path, field: str) -> Iterator[tuple[str, str]]:
    import pyarrow as pa  # deferred: only table sources need it
    import pyarrow.parquet as pq

    try:
        if f.suffix == ".parquet":
            batches = pq.ParquetFile(f).iter_batches(columns=[field])
        else:  # datasets' save_to_disk writes Arrow IPC streams
            batches = iter(pa.ipc.open_stream(pa.memory_map(str(f))))
        row = 0
        for batch in batches:
            if field not in batch.schema.names:
                raise KeyError(field)
            for text in batch.column(field).to_pylist():
                row += 1
                if text is not None:
                    yield f"{f}:{row}", str(text)
    except (KeyError, ValueError) as e:  # pyarrow: a missing column is a KeyError or ArrowInvalid (ValueError)
        raise DataError(f"{f}: no column {field!r} ({type(e).__name__}); name the text column with --field") from None


def dataset_dir(p: Path) -> Path | None:
    """The directory of arrow files a `save_to_disk` directory holds (a DatasetDict: its train split)."""
    if (p / "state.json").is_file() and (p / "dataset_info.json").is_file():
        return p
    if (p / "dataset_dict.json").is_file():
        splits = json.loads((p / "dataset_dict.json").read_text()).get("splits", [])
        split = "train" if "train" in splits else (splits[0] if splits else None)
        if split is None or dataset_dir(p / split) is None:
            raise DataError(f"{p}: a DatasetDict without a readable split; save one split with save_to_disk")
        return p / split
    return None


def dataset_files(d: Path) -> list[Path]:
    state = json.loads((d / "state.json").read_text())
    files = [d / e["filename"] for e in state.get("_data_files", [])]
    if not files or not all(f.is_file() for f in files):
        raise DataError(f"{d}/state.json names arrow files that are missing; save the dataset again")
    return files
