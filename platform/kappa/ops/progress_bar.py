"""The progress bar of a command that lasts, drawn by tqdm on stderr: `[#####     ]  17% 41,326 rows/s`.

Nothing is drawn for a run shorter than `after_s`, so a quick command's output is its result lines only; a message
said while the bar is up (`write`) goes on a line of its own above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

_STEP = 0.02  # redrawn each 2% of the work
_WIDTH = 30


class _Bar(tqdm):  # type: ignore[misc]  # tqdm has no type hints
    """tqdm with a rows-per-second field, and lines erased before they are redrawn (not padded after)."""

    monitor_interval = 0  # no monitor thread: the bar is redrawn by its updates
    rows = 0
    drawn = False

    @property
    def format_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = super().format_dict
        values["rows_per_s"] = f"{self.rows / max(values['elapsed'], 1e-9):,.0f}"
        return values

    def status_printer(self, file: TextIO) -> Callable[[str], None]:
        last = 0

        def draw(line: str) -> None:
            nonlocal last
            erase = "\r" + " " * last if last else ""
            file.write(f"{erase}\r{line}")
            file.flush()
            last = len(line)
            self.drawn = self.drawn or bool(line)

        return draw


class Progress:
    """A progress bar over a fraction of the work, with a count of rows, on `out` (None: nothing is drawn)."""

    def __init__(self, out: TextIO | None, after_s: float = 1.0, unit: str = "rows") -> None:
        self._out = out
        self._bar = _Bar(
            total=1.0,
            file=out,
            disable=out is None,
            delay=after_s,
            mininterval=0,
            miniters=_STEP,
            bar_format=f"[{{bar:{_WIDTH}}}] {{percentage:3.0f}}% {{rows_per_s}} {unit}/s",
            ascii=" #",
            leave=True,
        )

    @property
    def drawn(self) -> bool:
        return bool(self._bar.drawn)

    def update(self, fraction: float, rows: int) -> None:
        self._bar.rows = rows
        self._bar.update(fraction - self._bar.n)

    def write(self, line: str) -> None:
        """A line of its own, above the bar when the bar is up."""
        if self._out is not None:
            self._bar.write(line, file=self._out)

    def finish(self) -> None:
        """The bar's last state on its own line (when it was drawn at all)."""
        self._bar.close()
