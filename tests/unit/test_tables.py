"""The CLI's table layout as a property: at any width, every key column's header and values are printed whole,
each on the row's line; long columns are cut or folded, extra ones hidden only with a note naming them."""
from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from mgstreams.cli.tables import Column, Fit, FittedTable

WORD = st.text(alphabet=string.ascii_letters + string.digits + ":/._-", min_size=1, max_size=40)
COLUMNS = st.lists(st.tuples(st.text(alphabet=string.ascii_uppercase + "-", min_size=1, max_size=16),
                             st.sampled_from(list(Fit)), st.booleans()), min_size=1, max_size=9)


def render(table: FittedTable, width: int) -> str:
    console = Console(width=width, color_system=None, highlight=False)
    with console.capture() as captured:
        console.print(table, crop=False)
    return captured.get()


@settings(max_examples=150, deadline=None)
@given(COLUMNS, st.data(), st.integers(min_value=20, max_value=300))
def test_key_columns_are_whole_at_any_width(columns, data, width):
    headers = [f"{h}{i}" for i, (h, _, _) in enumerate(columns)]   # distinct
    spec = [Column(h, fit, fold) for h, (_, fit, fold) in zip(headers, columns, strict=False)]
    rows = data.draw(st.lists(st.lists(WORD, min_size=len(spec), max_size=len(spec)), min_size=1, max_size=4))
    text = render(FittedTable(spec, rows), width)
    lines = text.splitlines()
    header_line = lines[0]
    for i, column in enumerate(spec):
        if column.fit == Fit.KEY:
            assert column.header in header_line, (width, text)
            for row in rows:
                assert any(row[i] in line for line in lines[1:]), (row[i], width, text)
        elif column.fit == Fit.EXTRA and column.header not in header_line.split():
            assert "not shown at" in text and column.header in " ".join(text.split()), (width, text)
    keys = [c for c in spec if c.fit == Fit.KEY]
    needed = sum(max([len(c.header)] + [len(r[spec.index(c)]) for r in rows]) for c in keys) + 2 * (len(spec) - 1)
    headers = sum(len(c.header) for c in spec if c.fit == Fit.LONG and c.fold)   # a folded column's header stays whole
    if needed + headers + 6 * len(spec) <= width:
        assert max(len(line.rstrip()) for line in lines) <= width, (width, text)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(WORD, min_size=3, max_size=3), min_size=1, max_size=4))
def test_piped_width_prints_every_value_whole(rows):
    spec = [Column("A", Fit.KEY), Column("B", Fit.LONG), Column("C", Fit.EXTRA)]
    text = render(FittedTable(spec, rows), 1_000_000)
    for row, line in zip(rows, text.splitlines()[1:], strict=False):
        assert line.split() == row
