"""The CLI's tables: key columns always shown whole, long ones cut to fit, piped output whole.

rich's own layout drops a `no_wrap` column (or cuts it to nothing) when a table
is wider than the terminal, and that was NAME, STATUS, TOPIC, PARTITION or
OFFSET as often as anything else. Here the widths are decided before rich
sees the table, by what each column is to an operator:

- KEY (identity and state: name, status, topic, partition, offsets, lag,
  verdict) is never dropped nor cut: its width is its widest value;
- LONG (servers, transformation, sink, error, message, statements) shares what
  is left, each at least `LONG_MIN` wide, cut with an ellipsis or folded onto
  more lines;
- EXTRA (detail a wider terminal shows) is hidden, rightmost first, when
  the key columns and the long ones' minimum do not fit, then long columns cut
  with an ellipsis; a line under the table names what was hidden.

Layout happens when the table is rendered, at the console's width: a live view
re-fits on every refresh. Piped output is printed on a console as wide as the
widest row (`render.console`), so every value is whole.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

LONG_MIN = 6   # a long column cut with an ellipsis never gets narrower than this (nor than its widest value)
FOLD_MIN = 20  # a long column folded onto more lines (errors, statements) never gets narrower than this
GAP = 2        # rich's padding between two columns of a box-less table


class Fit(StrEnum):
    KEY = "key"
    LONG = "long"
    EXTRA = "extra"


@dataclass(frozen=True)
class Column:
    header: str
    fit: Fit = Fit.KEY
    fold: bool = False   # LONG: fold onto more lines (errors, statements) instead of an ellipsis


def key(header: str) -> Column:
    return Column(header, Fit.KEY)


def long(header: str, fold: bool = False) -> Column:
    return Column(header, Fit.LONG, fold)


def extra(header: str) -> Column:
    return Column(header, Fit.EXTRA)


def _width(text: str | Text) -> int:
    plain = text.plain if isinstance(text, Text) else text
    return max((cell_len(line) for line in plain.splitlines()), default=0)


class FittedTable:
    """Rows under upper-case headers, as Kafka's own tools print them, laid out at the console's width."""

    def __init__(self, columns: Iterable[Column], rows: Iterable[Iterable[Any]], title: str | None = None,
                 caption: str | None = None):
        self.columns = tuple(columns)
        # a cell is text, or rich Text when it carries a style (top's coloured verdicts)
        self.rows: list[tuple[str | Text, ...]] = [
            tuple("-" if cell is None else cell if isinstance(cell, Text) else str(cell) for cell in row)
            for row in rows]
        self.title = title
        self.caption = caption

    def natural_widths(self) -> list[int]:
        return [max([_width(c.header)] + [_width(r[i]) for r in self.rows]) for i, c in enumerate(self.columns)]

    def natural_width(self) -> int:
        """The width at which every value is whole: what a piped console is given."""
        widths = self.natural_widths()
        return max([sum(widths) + GAP * (len(widths) - 1)] + [_width(self.title or ""), _width(self.caption or "")])

    def layout(self, width: int) -> tuple[list[int | None], list[str]]:
        """Per column its width (None: hidden) at a console `width` wide, and the hidden headers."""
        natural = self.natural_widths()
        columns = self.columns

        fold_min = FOLD_MIN

        def floor(i: int) -> int:   # the least column i may get
            if columns[i].fit != Fit.LONG:
                return natural[i]
            if columns[i].fold:   # folded text reads on; a folded header does not
                return min(natural[i], max(fold_min, _width(columns[i].header)))
            return min(natural[i], LONG_MIN)

        def needed(indexes: list[int]) -> int:
            return sum(floor(i) for i in indexes) + GAP * (len(indexes) - 1)

        shown = list(range(len(columns)))
        hidden = []
        # Too narrow: extra columns go first, then long ones that would be cut anyway (rightmost first);
        # key columns and the folded ones (errors, messages) stay.
        for droppable in (lambda c: c.fit == Fit.EXTRA, lambda c: c.fit == Fit.LONG and not c.fold):
            for i in reversed(shown):
                if needed(shown) <= width:
                    break
                if droppable(columns[i]):
                    shown.remove(i)
                    hidden.append(i)
        if needed(shown) > width:   # still too narrow: folded columns fold narrower rather than push the keys out
            fold_min = LONG_MIN
        sized = {i: floor(i) for i in shown}
        room = width - needed(shown)
        growing = [i for i in shown if sized[i] < natural[i]]
        while room > 0 and growing:   # what is left is shared out, the narrowest served first
            share = max(room // len(growing), 1)
            for i in sorted(growing, key=lambda i: natural[i]):
                given = min(share, natural[i] - sized[i], room)
                sized[i] += given
                room -= given
            growing = [i for i in growing if sized[i] < natural[i]]
        return [sized.get(i) for i in range(len(columns))], [columns[i].header for i in sorted(hidden)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths, hidden = self.layout(options.max_width)
        table = Table(box=None, title=self.title, title_justify="left", header_style="bold", pad_edge=False,
                      caption=self.caption, caption_justify="left", caption_style="none", title_style="none")
        shown = [i for i, w in enumerate(widths) if w is not None]
        shown_widths = [w for w in widths if w is not None]
        for i in shown:
            column = self.columns[i]
            fold = column.fit == Fit.LONG and column.fold
            table.add_column(column.header, width=widths[i], no_wrap=not fold,
                             overflow="fold" if fold else "ellipsis")
        for row in self.rows:
            table.add_row(*(row[i] if isinstance(row[i], Text) else Text(row[i]) for i in shown))
        total = sum(shown_widths) + GAP * (len(shown) - 1)
        # Key columns too wide for the terminal: longer lines (the terminal wraps them), never a dropped column.
        yield from console.render(table, options.update(width=max(total, options.max_width)))
        if hidden:
            yield Text(f"(not shown at {options.max_width} columns: {', '.join(hidden)}; "
                       f"widen the terminal, pipe the output or use --json)", style="dim")
