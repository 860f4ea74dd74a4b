"""The tables of figures in docs/planner.md and docs/bench.md, generated from the code so they
cannot go stale.

  python -m shardlab.plan.doctables            rewrite the generated blocks in the docs
  python -m shardlab.plan.doctables --check    exit 1 if the docs differ from what the code gives

A block sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`; everything
else in the files is left as written. tests/plan/test_plan_doctables.py runs the check.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[3] / "docs"


def presets() -> str:
    from .presets import ALIASES, PRESETS
    lines = ["| preset | L | h | a | v | s | parameters | also accepted |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, m in PRESETS.items():
        alias = ", ".join(f"`{a}`" for a, real in ALIASES.items() if real == name)
        lines.append(f"| `{name}` | {m.n_layer} | {m.d_model} | {m.n_head} | {m.vocab} | {m.seq} | {m.params:,} | {alias} |")
    return "\n".join(lines)


def published() -> str:
    from .published import evaluate_published, published_table
    return "\n".join(published_table(evaluate_published())).rstrip()


def calibration() -> str:
    from .validate import CALIBRATION, HELD_OUT, HELD_OUT_QUICK, IN_SAMPLE, IN_SAMPLE_QUICK, held_out_axes
    cal = CALIBRATION
    lines = [f"Calibration set: models {', '.join(f'`{m}`' for m in cal['models'])} at micro batches "
             f"{', '.join(map(str, cal['micro_batches']))}; collectives and overlap at world {cal['world']}; "
             f"trainer overhead with {', '.join(f'`{s}` at world {w}' for s, w in cal['trainer'])} "
             "(on the miniature of the first model).", "",
             "| set | model | strategy | micro batch | world | held out on | in `--quick` |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for group, quick in ((IN_SAMPLE, IN_SAMPLE_QUICK), (HELD_OUT, HELD_OUT_QUICK)):
        for c in group:
            axes = held_out_axes(*c)
            lines.append(f"| {'held out' if axes else 'in sample'} | {c[0]} | {c[1]} | {c[2]} | {c[3]} | "
                         f"{', '.join(axes) or '-'} | {'yes' if c in quick else ''} |")
    return "\n".join(lines)


def seed000() -> str:
    from .comm import SEED000, payload_kib_per_token
    lines = ["| figure | value (KiB/token) | what it is |", "| --- | --- | --- |"]
    for mb in (1, 8):
        v = payload_kib_per_token(SEED000["params"], mb, SEED000["seq"], SEED000["bytes_per_value"])
        lines.append(f"| `seed000_payload_kib_mb{mb}` | {v:.1f} | reproduced: {SEED000['params']:,} params x "
                     f"{SEED000['bytes_per_value']} B / ({mb} x {SEED000['seq']}) tokens; not measured |")
    return "\n".join(lines)


# file in docs/ -> generated block name -> the function that writes it
BLOCKS = {"planner.md": {"presets": presets, "published": published, "calibration": calibration},
          "bench.md": {"reference_payload": seed000}}


def render(text: str, doc: str = "planner.md") -> str:
    """`text` (docs/`doc`) with every generated block replaced by what the code gives now."""
    for name, fn in BLOCKS[doc].items():
        pat = re.compile(rf"(<!-- generated: {name} -->\n)(.*?\n)?(<!-- end generated: {name} -->)", re.S)
        if not pat.search(text):
            raise ValueError(f"{doc}: no generated block {name!r}")
        text = pat.sub(lambda m: m.group(1) + fn() + "\n" + m.group(3), text)
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for doc in BLOCKS:
        path = DOCS / doc
        text = path.read_text()
        new = render(text, doc)
        if new != text:
            stale.append(path)
            if "--check" not in argv:
                path.write_text(new)
    if stale and "--check" in argv:
        print(f"{', '.join(map(str, stale))}: generated tables are stale; run python -m shardlab.plan.doctables",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
