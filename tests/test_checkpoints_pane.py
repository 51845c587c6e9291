"""The Tensors pane and the Compare view against the real local agent: small SpecForge-layout
drafters written with safetensors, opened by path and through the host file picker."""

import json

from textual.widgets import DataTable, Input, OptionList, Static

from tests.checkpoint_fixtures import FIXTURE_CACHE, build_drafter, cached_moe_target
from tests.helpers.pilot import TensorsHost, screen_lines, text_of
from tests.helpers.waits import wait_until
from tui.checkpoints.compare import CompareScreen
from tui.checkpoints.pane import TensorsPane
from tui.screens.file_picker import FilePicker


def table_rows(pane):
    table = pane.query_one("#tensors-table", DataTable)
    return [[str(cell) for cell in table.get_row_at(index)] for index in range(table.row_count)]


async def test_open_path_lists_every_tensor_with_role_shape_dtype_and_totals(client, tmp_path):
    drafter = build_drafter(tmp_path / "k2 [bold]-eagle3")  # a path is shown as it is, not as markup
    app = TensorsHost(client)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None)
        rows = {row[0]: row for row in table_rows(pane)}
        assert len(rows) == 15
        assert rows["fc.weight"][1:4] == ["[64, 192]", "BF16", "24,576"]
        assert "fuses 3 auxiliary hidden states" in rows["fc.weight"][4] and "not QKV" in rows["fc.weight"][4]
        assert rows["d2t"][1:4] == ["[96]", "I64", "768"]
        assert "draft id -> target id" in rows["d2t"][4]
        assert all(row[4] for row in rows.values()), "every tensor has a role"
        total = sum(t["bytes"] for t in pane.report["tensors"])
        totals = text_of(pane.query_one("#tensors-totals", Static))
        assert "15 tensors" in totals and "{:,} bytes".format(total) in totals and "kB" in totals and "KiB" in totals
        summary = text_of(pane.query_one("#tensors-summary", Static))
        assert "specforge" in summary and "hidden 64" in summary and "draft vocab 96" in summary
        assert "target vocab 256" in summary and "[1, 3, 5]" in summary

        # A path that is not there: the host's one line, and the open checkpoint stays as it was.
        pane.open_path(str(tmp_path / "no-such-drafter"))
        status = pane.query_one("#tensors-status", Static)
        await wait_until(pilot, lambda: status.has_class("error"))
        assert "no-such-drafter does not exist" in text_of(status)
        assert text_of(pane.query_one("#tensors-path", Static)) == str(drafter) and len(table_rows(pane)) == 15
        assert not text_of(pane.query_one("#tensors-problems", Static)).strip()
        assert text_of(pane.query_one("#tensors-path", Static)) == str(drafter)
        # The highlighted tensor's role, whole, under the table (the column is cut on a narrow screen).
        table = pane.query_one("#tensors-table", DataTable)
        table.move_cursor(row=[row[0] for row in table_rows(pane)].index("fc.weight"))
        await pilot.pause()
        assert text_of(pane.query_one("#tensors-role", Static)) == "fc.weight: " + rows["fc.weight"][4]


async def test_filter_and_sort(client, tmp_path):
    drafter = build_drafter(tmp_path / "drafter")
    app = TensorsHost(client)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None)
        pane.query_one("#tensors-table", DataTable).focus()
        await pilot.press("slash", *"self_attn")
        names = [row[0] for row in table_rows(pane)]
        assert len(names) == 4 and all("self_attn" in name for name in names)
        assert "shown 4" in text_of(pane.query_one("#tensors-totals", Static))
        await pilot.press("escape")
        assert len(table_rows(pane)) == 15
        await pilot.press("s")  # by size, largest first
        sizes = [int(row[3].replace(",", "")) for row in table_rows(pane)]
        assert sizes == sorted(sizes, reverse=True) and table_rows(pane)[0][0] in ("fc.weight", "lm_head.weight")
        await pilot.press("s")  # by dtype
        dtypes = [row[2] for row in table_rows(pane)]
        assert dtypes == sorted(dtypes)


async def test_open_through_the_picker_by_typing_and_by_walking(client, tmp_path):
    drafter = build_drafter(tmp_path / "models" / "drafter")
    (tmp_path / "models" / "notes.txt").write_text("not a checkpoint")
    app = TensorsHost(client)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.query_one(TensorsPane)
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
        picker = app.screen
        await wait_until(pilot, lambda: picker.directory is not None)  # the home directory first
        # Typing "/" in the list starts a path; with a trailing "/" Enter opens that directory.
        await pilot.press(*(str(tmp_path / "models") + "/"), "enter")
        await wait_until(pilot, lambda: picker.directory == str(tmp_path / "models"))
        labels = [str(picker.query_one(OptionList).get_option_at_index(i).prompt) for i in range(picker.query_one(OptionList).option_count)]
        assert labels[0] == "../" and labels[1] == "drafter/" and labels[2].startswith("notes.txt")
        # The highlight is on drafter/; o picks the directory itself.
        await pilot.press("o")
        await wait_until(pilot, lambda: pane.report is not None)
        assert pane.path == str(drafter)
        assert len(table_rows(pane)) == 15

        # Walking: Enter opens drafter/, Backspace goes up again, Enter on a file picks it.
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker) and app.screen.directory == str(tmp_path / "models"))
        picker = app.screen
        await pilot.press("enter")
        await wait_until(pilot, lambda: picker.directory == str(drafter))
        await pilot.press("backspace")
        await wait_until(pilot, lambda: picker.directory == str(tmp_path / "models"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: picker.directory == str(drafter))
        labels = [str(picker.query_one(OptionList).get_option_at_index(i).prompt) for i in range(picker.query_one(OptionList).option_count)]
        await pilot.press(*["down"] * (next(i for i, label in enumerate(labels) if label.startswith("model.safetensors")) - 1), "enter")
        await wait_until(pilot, lambda: pane.path == str(drafter / "model.safetensors") and pane.report is not None and pane.report["path"].endswith(".safetensors"))
        assert len(table_rows(pane)) == 15

        # A path that is not there: the host's line, and the old listing stays.
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
        picker = app.screen
        picker.query_one("#picker-path", Input).value = str(tmp_path / "missing") + "/"
        picker.query_one("#picker-path", Input).focus()
        await pilot.press("enter")
        status = picker.query_one("#picker-status", Static)
        await wait_until(pilot, lambda: status.has_class("error"))
        assert "no such directory" in text_of(status)
        await pilot.press("escape")
        assert not isinstance(app.screen, FilePicker)


async def compare_from_pane(pilot, app, mine, other):
    """Open `mine` in the Tensors pane, press c and pick `other`: the compare screen, once shown."""
    pane = app.query_one(TensorsPane)
    pane.open_path(str(mine))
    await wait_until(pilot, lambda: pane.report is not None)
    await pilot.press("c")
    await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
    await pilot.press(*str(other), "enter")
    await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), timeout_s=30)
    return app.screen


async def test_compare_two_drafters_whose_shapes_differ(client, tmp_path):
    mine = build_drafter(tmp_path / "mine", hidden=64)
    other = build_drafter(tmp_path / "other", hidden=64, target_hidden=96)
    app = TensorsHost(client)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await compare_from_pane(pilot, app, mine, other)
        verdict = screen.query_one("#compare-verdict", Static)
        assert "INCOMPATIBLE" in text_of(verdict) and verdict.has_class("incompatible")
        assert text_of(screen.query_one("#compare-reasons", Static)).strip()
        table = screen.query_one("#compare-rows", DataTable)
        # Status first (short words), then the tensor, then what A and B hold.
        rows = {str(table.get_row_at(i)[1]): table.get_row_at(i) for i in range(table.row_count)}
        fc = rows["fc.weight"]
        assert str(fc[2]) == "[64,192] BF16" and str(fc[3]) == "[64,288] BF16"
        assert str(fc[0]) == "shape" and "red" in str(fc[1].style)
        assert str(rows["norm.weight"][0]) == "same" and not str(rows["norm.weight"][1].style)
        config = screen.query_one("#compare-config", DataTable)
        fields = {str(config.get_row_at(i)[0]): [str(c) for c in config.get_row_at(i)[1:]] for i in range(config.row_count)}
        assert fields["target_hidden_size"] == ["(not set)", "96"]
        await pilot.press("d")  # differences only
        assert {str(table.get_row_at(i)[1]) for i in range(table.row_count)} == set(screen.differing_rows())
        await pilot.press("escape")
        assert app.screen is not screen and app.query_one(TensorsPane).report["path"] == str(mine)


async def test_problems_come_first_errors_red_warnings_yellow(client, tmp_path):
    drafter = build_drafter(tmp_path / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config["hidden_size"] = 128  # the tensors say 64
    del config["draft_vocab_size"]  # vLLM would then take the target's vocabulary
    (drafter / "config.json").write_text(json.dumps(config))
    app = TensorsHost(client)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None)
        problems = pane.query_one("#tensors-problems", Static)
        assert problems.display and problems.region.y < pane.query_one("#tensors-table", DataTable).region.y
        text = problems.render()
        lines = str(text).splitlines()
        error = next(i for i, line in enumerate(lines) if "config.json says hidden_size 128" in line)
        warning = next(i for i, line in enumerate(lines) if "no draft_vocab_size" in line)
        assert lines[error].startswith("error: ") and lines[warning].startswith("warning: ")

        def styles_on_line(index):
            start = sum(len(line) + 1 for line in lines[:index])
            return {str(span.style) for span in text.spans if span.start >= start and span.end <= start + len(lines[index])}

        assert any("red" in style for style in styles_on_line(error)) and not any("yellow" in style for style in styles_on_line(error))
        assert any("yellow" in style for style in styles_on_line(warning)) and not any("red" in style for style in styles_on_line(warning))
        assert len(table_rows(pane)) == 15  # the listing is still there to look at


# --------------------------------------------------------------------------- at 80x24

async def test_corrupt_checkpoint_at_80x24_shows_a_problem_count_and_still_the_tensors(client, tmp_path):
    drafter = build_drafter(tmp_path / "drafter")
    config = json.loads((drafter / "config.json").read_text())
    config.update(hidden_size=128, num_attention_heads=8, num_key_value_heads=8, intermediate_size=999)
    del config["draft_vocab_size"]
    (drafter / "config.json").write_text(json.dumps(config))
    with open(str(drafter / "model.safetensors"), "ab") as f:
        f.write(b"\0" * 24)  # a file longer than its header says
    app = TensorsHost(client)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None)
        await pilot.pause()
        errors = sum(1 for p in pane.report["problems"] if p["level"] == "error")
        assert errors >= 4
        lines = screen_lines(app)
        count = next(i for i, line in enumerate(lines) if line.startswith("%d errors, 1 warning" % errors))
        assert "(first 3 below" in lines[count]
        assert [line.split(":")[0] for line in lines[count + 1:count + 4]] == ["error"] * 3
        # What could be read is still there: the table's header and its first rows are on screen.
        table_top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["name", "shape", "dtype"])
        assert table_top < 14 and any(line.startswith(" d2t ") or line.startswith("d2t ") for line in lines[table_top:])
        assert any("fc.weight" in line for line in lines[table_top:])


async def test_compare_at_80x24_keeps_the_status_column_on_screen(client, tmp_path):
    mine = build_drafter(tmp_path / "mine", hidden=64)
    other = build_drafter(tmp_path / "other", hidden=64, target_hidden=96, values=1)  # weights of its own
    app = TensorsHost(client)
    async with app.run_test(size=(80, 24)) as pilot:
        await compare_from_pane(pilot, app, mine, other)
        await pilot.pause()
        lines = screen_lines(app)
        header = next(line for line in lines if line.split()[:2] == ["status", "tensor"])
        assert header.split()[2:] == ["A", "B"]
        fc = next(line for line in lines if line.split()[1:2] == ["fc.weight"])
        assert fc.split()[0] == "shape" and fc.rstrip().endswith("[64,288] BF16") and "[64,192] BF16" in fc
        assert any(line.split()[:2] == ["values", "midlayer.hidden_norm.weight"] for line in lines)
        assert any("values (first, middle, last 64 KiB): 2 same, " in line for line in lines)
        assert any("values: same shape and dtype, other values" in line for line in lines)


async def test_picker_at_80x24_says_what_o_and_enter_do(client, tmp_path):
    drafter = build_drafter(tmp_path / "models" / "drafter")
    app = TensorsHost(client)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(TensorsPane)
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
        picker = app.screen
        await pilot.press(*(str(tmp_path / "models") + "/"), "enter")
        await wait_until(pilot, lambda: picker.directory == str(tmp_path / "models"))
        await pilot.pause()
        lines = screen_lines(app)
        assert any("Enter open dir/pick file   o pick highlighted   Backspace up" in line for line in lines)
        assert any("/ or ~ type a path   Esc cancel" in line for line in lines)
        # Enter on a directory browses into it; o then picks the highlighted entry, a file here.
        await pilot.press("enter")
        await wait_until(pilot, lambda: picker.directory == str(drafter))
        entries = picker.query_one(OptionList)
        labels = [str(entries.get_option_at_index(i).prompt) for i in range(entries.option_count)]
        entries.highlighted = next(i for i, label in enumerate(labels) if label.startswith("model.safetensors"))
        await pilot.press("o")
        await wait_until(pilot, lambda: pane.report is not None)
        assert pane.path == str(drafter / "model.safetensors")


async def test_n_means_nothing_twice_in_the_tensors_pane(client, tmp_path):
    keys = [binding.key for binding in TensorsPane.BINDINGS]
    assert len(keys) == len(set(keys)), "a key bound twice in the Tensors pane"
    drafter = build_drafter(tmp_path / "drafter")
    app = TensorsHost(client)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None)
        status = text_of(pane.query_one("#tensors-status", Static))
        await pilot.press("n")  # not a key of this pane: nothing opens, nothing changes
        await pilot.pause()
        assert len(app.screen_stack) == 1 and len(table_rows(pane)) == 15
        assert text_of(pane.query_one("#tensors-status", Static)) == status and pane.filter_text == ""
        # In the filter, n is a letter of the filter.
        await pilot.press("slash", "n", "o", "r", "m")
        assert pane.query_one("#tensors-filter", Input).value == "norm"


async def test_huge_checkpoint_at_80x24_pages_filters_and_groups(client):
    from tui.checkpoints.pane import PAGE_TENSORS

    moe = cached_moe_target(FIXTURE_CACHE)
    app = TensorsHost(client)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(moe["directory"])
        await wait_until(pilot, lambda: pane.report is not None)
        await pilot.pause()
        lines = screen_lines(app)
        assert any("139,583 tensors in 37 name patterns: g shows them" in line for line in lines)
        table = pane.query_one("#tensors-table", DataTable)
        assert table.row_count == len(pane.report["tensors"])
        pane.query_one("#tensors-table", DataTable).focus()
        table.move_cursor(row=table.row_count - 1)  # near the end: the next page loads
        await wait_until(pilot, lambda: table.row_count > len(pane.report["tensors"]))
        assert table.row_count == len(pane.report["tensors"]) + PAGE_TENSORS
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert names == sorted(names) and len(set(names)) == len(names)
        await pilot.press("slash", *"experts.17.")
        await wait_until(pilot, lambda: pane.page_total == 360 and table.row_count == 360)
        assert any('shown 360 matching "experts.17."' in line for line in screen_lines(app))
        await pilot.press("enter", "g")  # the name patterns, largest first
        assert str(table.get_row_at(0)[1]) == "model.layers.{N}.mlp.experts.{E}.down_proj.weight"
        assert str(table.get_row_at(0)[0]) == "23,040"


async def test_compare_with_a_folder_that_is_not_a_checkpoint_says_so_in_one_line(client, tmp_path):
    mine = build_drafter(tmp_path / "mine")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("no weights here\n")
    app = TensorsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(str(mine))
        await wait_until(pilot, lambda: pane.report is not None)
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
        await pilot.press(*str(notes), "enter")
        status = pane.query_one("#tensors-status", Static)
        await wait_until(pilot, lambda: "not a checkpoint" in text_of(status), timeout_s=30)
        assert not isinstance(app.screen, CompareScreen)
        assert len(text_of(status).strip().splitlines()) == 1 and str(notes) in text_of(status)
        assert pane.report["path"] == str(mine)  # the open checkpoint stays open


async def test_two_huge_targets_are_compared_on_the_host_and_only_the_result_comes_back(client):

    moe = cached_moe_target(FIXTURE_CACHE)
    app = TensorsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(TensorsPane)
        pane.open_path(moe["directory"])
        await wait_until(pilot, lambda: pane.report is not None)
        assert not pane.report["complete"]  # only the first page of 139,583 tensors came
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, FilePicker))
        await pilot.press(*moe["directory"], "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), timeout_s=300)
        screen = app.screen
        await wait_until(pilot, lambda: text_of(screen.query_one("#compare-verdict", Static)).strip(), timeout_s=120)
        verdict = text_of(screen.query_one("#compare-verdict", Static))
        # The host matched all 139,583 tensor pairs and sent the first 20,000 rows, not the listings.
        assert "INCOMPATIBLE" in verdict and "20000 of 139583 tensor rows shown" in verdict
        assert screen.query_one("#compare-rows", DataTable).row_count == 20000
        assert "A is not an EAGLE-3 drafter" in text_of(screen.query_one("#compare-reasons", Static))


async def test_an_empty_file_opened_after_a_good_one_leaves_no_detail_of_the_good_one(client, tmp_path):
    """The line under the table names the highlighted tensor's role; an empty .safetensors file
    has no tensor to highlight, so the line must not go on naming one of the file before."""
    drafter = build_drafter(tmp_path / "good")
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    app = TensorsHost(client)
    async with app.run_test(size=(140, 45)) as pilot:
        pane = app.query_one(TensorsPane)
        role = pane.query_one("#tensors-role", Static)
        pane.open_path(str(drafter))
        await wait_until(pilot, lambda: pane.report is not None and text_of(role))
        assert ": " in text_of(role)
        pane.open_path(str(empty))
        await wait_until(pilot, lambda: pane.path == str(empty) and pane.report.get("path", "").endswith("empty.safetensors"))
        await pilot.pause()
        assert table_rows(pane) == []
        assert text_of(role) == "", "the detail line still names a tensor of the file opened before"
        problems = text_of(pane.query_one("#tensors-problems", Static))
        assert problems, "the empty file's problem is said"
