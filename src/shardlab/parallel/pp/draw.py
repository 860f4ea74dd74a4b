"""Pictures of a schedule: the classic pipeline diagram (ranks down, time across), as text for a
terminal or the docs and as a PNG. Both come from timed spans: the simulator's (equal stage times) or
a traced run's."""
from __future__ import annotations

from pathlib import Path

from shardlab.parallel.pp.schedule import Schedule
from shardlab.parallel.pp.simulate import simulate

COLORS = {"F": "#4c72b0", "B": "#55a868", "I": "#8fd19e", "W": "#c44e52"}


def text_diagram(schedule: Schedule, f: float = 1, b: float = 2) -> str:
    """One character per time unit: the microbatch number for a forward, a letter for a backward
    (a = mb 0, b = mb 1, ...), upper-case letters for a weight gradient, '.' for the bubble. A chunk
    suffix is not shown; with interleaving a virtual stage does 1/V of a stage's work."""
    f, b = f / schedule.virtual, b / schedule.virtual
    t = simulate(schedule, f=f, b=b)
    unit = min(f, b / 2)
    width = int(round(t.makespan / unit))
    rows = []
    for r, spans in enumerate(t.spans):
        cells = ["."] * width
        for ins, start, end in spans:
            ch = {"F": str(ins.mb % 10), "B": chr(97 + ins.mb % 26), "I": chr(97 + ins.mb % 26),
                  "W": chr(65 + ins.mb % 26)}[ins.op]
            for k in range(int(round(start / unit)), int(round(end / unit))):
                cells[k] = ch
        rows.append(f"rank {r} |{''.join(cells)}| bubble {t.bubble[r]:.0%}")
    return "\n".join(rows)


def png_diagram(spans: list[list[tuple]], path: Path, title: str) -> Path:
    """`spans[r]` = [(op, mb, start, end)] for rank r (op in F B I W): coloured boxes per rank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.6 * len(spans) + 1.2))
    for r, row in enumerate(spans):
        for op, mb, start, end in row:
            ax.barh(r, end - start, left=start, color=COLORS[op], edgecolor="white", height=0.8)
            ax.text((start + end) / 2, r, str(mb), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(spans)), [f"rank {r}" for r in range(len(spans))])
    ax.invert_yaxis()
    ax.set_xlabel("time")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, ["forward", "backward", "backward (input)", "backward (weight)"], loc="upper center",
              bbox_to_anchor=(0.5, -0.35), fontsize=7, ncol=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def simulated_spans(schedule: Schedule, f: float = 1, b: float = 2) -> list[list[tuple]]:
    f, b = f / schedule.virtual, b / schedule.virtual
    return [[(i.op, i.mb, s, e) for i, s, e in row] for row in simulate(schedule, f=f, b=b).spans]
