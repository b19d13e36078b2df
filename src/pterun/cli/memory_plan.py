"""The memory plan drawn: each arena's planned tensors as byte ranges over the instructions that keep them alive.

In the terminal (Rich) rows are byte ranges and columns instructions, each cell shaded by how much of it
live tensors cover; ``--plot`` writes the same with matplotlib (an optional dependency, the ``plot``
extra), one rectangle per tensor. What is alive when is the format layer's (format/lifetimes.py).
Names come from the file: through ``visible``/``esc`` in the terminal, and with mathtext's ``$`` escaped in
a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text

from pterun import MethodMeta
from pterun.cli.report import UserError, visible
from pterun.format.lifetimes import ArenaPlan, PlannedTensor

SHADES = " ░▒▓█"  # a cell's live share: none, up to 1/4, 1/2, 3/4, more
PLOT_SUFFIXES = (".svg", ".png")
LABELLED = 6  # tensors named in a figure, per arena: the largest (bytes times instructions alive)


@dataclass(frozen=True)
class ArenaSummary:
    arena: ArenaPlan
    device: str
    live: list[int]  # per instruction, bytes some live tensor covers

    @property
    def peak(self) -> int:
        return max(self.live, default=0)

    @property
    def peak_at(self) -> int:
        return self.live.index(self.peak) if self.live else 0

    @property
    def saved(self) -> int:
        """Bytes planning saves against one buffer per tensor."""
        return self.arena.unshared_bytes - self.arena.size


def summarise(arena: ArenaPlan, device: str) -> ArenaSummary:
    return ArenaSummary(arena, device, arena.live_bytes())


def tensor_name(meta: MethodMeta, t: PlannedTensor) -> str:
    """A tensor's name as the file gives it (a mutable buffer's ``fqn``), else its value index."""
    return meta.tensor_meta(t.value).name() or f"v{t.value}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def summary_line(s: ArenaSummary) -> str:
    a = s.arena
    return (f"arena {a.memory_id} on {s.device}: {a.size:,} bytes, {len(a.tensors)} tensors; peak live "
            f"{s.peak:,} bytes at instruction {s.peak_at}; one buffer per tensor would take "
            f"{a.unshared_bytes:,} bytes: {_saving(s)}")


def _saving(s: ArenaSummary) -> str:
    if s.saved > 0:
        return f"planning saves {s.saved:,} bytes ({s.arena.unshared_bytes / s.arena.size:.1f}× smaller)"
    return f"planning saves nothing (the arena is {-s.saved:,} bytes larger)"


def picture(s: ArenaSummary, width: int, rows: int = 12) -> Text:
    """The arena as text: rows of bytes (offset 0 at the top) by columns of instructions."""
    a = s.arena
    label_width = 10
    cols = max(1, min(a.steps, width - label_width - 2))
    rows = max(1, min(rows, a.size)) if a.size else 1
    row_bytes = max(a.size, 1) / rows
    per_col = a.steps / cols
    cover = [[0.0] * cols for _ in range(rows)]
    for n, ranges in a.live():
        c = min(int(n / per_col), cols - 1)
        for start, end in ranges:
            r = int(start / row_bytes)
            while r < rows and r * row_bytes < end:
                low, high = r * row_bytes, (r + 1) * row_bytes
                cover[r][c] += max(0.0, min(end, high) - max(start, low))
                r += 1
    steps_in = [0] * cols
    for n in range(a.steps):
        steps_in[min(int(n / per_col), cols - 1)] += 1
    text = Text()
    for r in range(rows):
        text.append(f"{_size(r * row_bytes):>{label_width}}│", style="dim")
        for c in range(cols):
            share = cover[r][c] / (row_bytes * steps_in[c]) if steps_in[c] else 0.0
            shade = 0 if share <= 0 else min(4, 1 + int(share * 4 - 1e-9))
            text.append(SHADES[shade], style="cyan" if shade else "")
        text.append("│\n", style="dim")
    end = str(a.steps - 1)
    axis = "0".ljust(max(cols - len(end), 1)) + end
    text.append(" " * label_width + "└" + "─" * cols + "┘\n", style="dim")
    text.append(" " * (label_width + 1) + axis + "\n", style="dim")
    text.append(f"rows: byte offsets, {_size(row_bytes)} each; columns: instructions, {per_col:.3g} each\n"
                f"shade: the share of a cell live tensors cover  {SHADES[1]} ≤¼  {SHADES[2]} ≤½  {SHADES[3]} ≤¾  "
                f"{SHADES[4]} more", style="dim")
    return text


def largest(arena: ArenaPlan, count: int = LABELLED) -> list[PlannedTensor]:
    """The tensors that take the most of the picture: bytes times instructions alive."""
    return sorted(arena.tensors, key=lambda t: (-t.nbytes * t.span, t.value))[:count]


def _tick(size: int) -> int:
    """A power of two that cuts ``size`` bytes into at most eight parts: labels in whole KiB or MiB."""
    return 1 << max(0, (max(size, 1) - 1) // 8).bit_length()


def _plain(name: str) -> str:
    # Mathtext reads text between two '$'; a name is shown as written.
    return visible(name).replace("$", r"\$")


def plot(path: Path, methods: list[tuple[MethodMeta, list[ArenaSummary]]]) -> int:
    """Writes the figure (format by the file's suffix); returns the number of tensors drawn."""
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise UserError(f"--plot {visible(path)}: expected a file ending in .svg or .png")
    try:
        from matplotlib import colormaps
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
        from matplotlib.ticker import FuncFormatter, MultipleLocator
    except ImportError:
        raise UserError("--plot needs matplotlib, which is not installed: pip install 'pterun[plot]'") from None
    panels = [(meta, s) for meta, summaries in methods for s in summaries if s.arena.tensors]
    if not panels:
        raise UserError(f"--plot {visible(path)}: the program plans no memory, so there is nothing to draw")
    figure = Figure(figsize=(11, 3.6 * len(panels)), layout="constrained")
    colours = colormaps["tab20"]
    drawn = 0
    for k, (meta, s) in enumerate(panels):
        a = s.arena
        ax = figure.add_subplot(len(panels), 1, k + 1)
        for i, t in enumerate(a.tensors):
            if t.first is None or not t.nbytes:
                continue
            edge = ("black", 0.3) if t.role == "temporary" else ("red", 1.2)
            rect = Rectangle((t.first, t.offset), t.span, t.nbytes, facecolor=colours(i % 20), edgecolor=edge[0],
                             linewidth=edge[1], alpha=0.85)
            rect.set_gid(f"tensor-{t.value}")
            ax.add_patch(rect)
            drawn += 1
        for t in largest(a):
            if t.first is not None and t.nbytes >= a.size / 50:  # a label on a thin tensor would hide others
                ax.text(t.first + t.span / 2, t.offset + t.nbytes / 2, _plain(f"{tensor_name(meta, t)} ({t.role})"),
                        ha="center", va="center", fontsize=7, clip_on=True)
        ax.set_xlim(0, a.steps)
        ax.set_ylim(max(a.size, 1), 0)  # offset 0 at the top, as in the terminal
        ax.yaxis.set_major_locator(MultipleLocator(_tick(a.size)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _size(y)))
        ax.set_xlabel("instruction (red edge: an input, output or mutable buffer)")
        ax.set_ylabel(f"byte offset in arena {a.memory_id}")
        ax.set_title(_plain(f"{meta.name()} · arena {a.memory_id} on {s.device}: {_size(a.size)}, peak live "
                            f"{_size(s.peak)} at instruction {s.peak_at}; one buffer per tensor: "
                            f"{_size(a.unshared_bytes)}, {_saving(s)}"), fontsize=9)
    figure.savefig(path)
    return drawn
