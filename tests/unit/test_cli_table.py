"""kappa.cli.table.render: the CLI's listings stay aligned whatever the length of their cells."""

from __future__ import annotations

import pytest

from kappa.cli.table import render


def test_each_column_is_as_wide_as_its_widest_cell_two_spaces_apart() -> None:
    lines = render(
        ("job", "version", "state"),
        [("enrich_clicks_realtime_backfill", "12", "running"), ("raw_clicks", "1", "crashed")],
        "<><",
    )
    assert lines == [
        "job                              version  state",
        "enrich_clicks_realtime_backfill       12  running",
        "raw_clicks                             1  crashed",
    ]


def test_a_header_wider_than_its_cells_sets_the_width_and_no_line_ends_in_spaces() -> None:
    lines = render(("lag", "last batch"), [("7", "")], ">>")
    assert lines == ["lag  last batch", "  7"]


def test_without_rows_only_the_header() -> None:
    assert render(("job", "pid"), [], "<>") == ["job  pid"]


@pytest.mark.parametrize("align", ["<", "<<<", "<^"])
def test_an_align_that_does_not_fit_the_columns_is_refused(align: str) -> None:
    with pytest.raises(ValueError, match="align"):
        render(("job", "pid"), [], align)


def test_a_row_with_another_number_of_cells_is_refused() -> None:
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        render(("job", "pid"), [("raw_clicks",)], "<>")
