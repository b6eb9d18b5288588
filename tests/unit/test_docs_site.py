"""The documentation site's shape (issue 35): the README stays a first screen that links into docs/, every page the
site's nav names exists, and every `MGSTREAMS_*` variable the code reads is in the configuration reference.

`make docs` (CI) builds the site with `mkdocs build --strict`; tests/host/test_readme_commands.py runs the commands.
"""
from __future__ import annotations

import re

import yaml
from paths import ROOT, nav_pages

README = ROOT / "README.md"
DOCS = ROOT / "docs"
SOURCES = ("mgstreams", "stream_registry", "spark_bridge", "query_modules")




def test_readme_is_a_first_screen_with_the_two_commands_and_links():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len([link for link in links if link.startswith("docs/")]) >= 10, links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_every_nav_page_exists_and_the_sections_are_there():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    assert [page for page in listed if not (DOCS / page).is_file()] == []
    sections = [next(iter(item)) for item in config["nav"] if isinstance(item, dict)]
    assert {"Getting started", "How-to guides", "Reference"} <= set(sections), sections
    assert "mkdocs-click" in config["markdown_extensions"]
    assert "::: mkdocs-click" in (DOCS / "reference" / "cli.md").read_text()


def test_every_variable_the_code_reads_is_in_the_configuration_reference():
    read = set()
    for package in SOURCES:
        for path in (ROOT / package).rglob("*.py"):
            read |= set(re.findall(r"MGSTREAMS_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    read -= {"MGSTREAMS_PREPARE"}   # a transformation module's attribute, documented beside the table
    assert len(read) >= 15, read
    table = (DOCS / "reference" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `(MGSTREAMS_[A-Z_]+)` \|", table, re.M))
    assert read - documented == set(), f"variables missing from docs/reference/configuration.md: {read - documented}"
    assert documented - read == set(), f"documented variables nothing reads: {documented - read}"


def test_what_the_docs_say_of_changed_at_is_what_the_cli_and_the_api_print(capsys):
    """The docs said `+00:00` while `mgstreams history --json` prints `Z` (issue 35)."""
    import datetime
    import json

    from mgstreams.cli.invocation import print_json
    from mgstreams.wire import to_json

    moment = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
    print_json({"changed_at": moment})                                  # what `--json` prints
    assert json.loads(capsys.readouterr().out)["changed_at"] == "2026-11-26T12:00:00Z"
    assert to_json({"changed_at": moment})["changed_at"] == "2026-11-26T12:00:00+00:00"   # the API's answers
    text = " ".join((DOCS / "how-to" / "move-a-stream.md").read_text().split())
    assert "`changed_at` is UTC: written with `Z` by the CLI (its tables and `--json`), with `+00:00` in the " \
           "API's JSON" in text


def test_gitignore_holds_what_getting_started_and_the_docs_build_leave_behind():
    ignored = set((ROOT / ".gitignore").read_text().splitlines())
    started = (DOCS / "getting-started.md").read_text()
    for name in ("kafka.txt", "serve.txt"):
        assert f"> {name}" in started and name in ignored, name
    assert "MGSTREAMS_STATE_DIR=$PWD/mgstreams-state" in started and "mgstreams-state/" in ignored
    assert "site/" in ignored   # make docs


# -- issue 46: titles, the README's list, backticks, wrapping ------------------------------------------------------
def _nav_entries(nav) -> list[tuple[str, str]]:
    """(label, page) of every page in the nav."""
    out = []
    for item in nav:
        for label, value in item.items():
            out += _nav_entries(value) if isinstance(value, list) else [(label, value)]
    return out


def _title(page) -> str:
    first = page.read_text().split("\n", 1)[0]
    assert first.startswith("# "), f"{page.relative_to(ROOT)}: the first line is not an H1: {first!r}"
    return first[2:].replace("`", "").strip()


def test_every_page_starts_with_an_h1_that_its_nav_label_repeats():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    wrong = [(label, page, _title(DOCS / page)) for label, page in _nav_entries(config["nav"])
             if label != _title(DOCS / page)]
    assert wrong == [], f"nav labels that are not their page's title: {wrong}"
    for page in DOCS.rglob("*.md"):
        _title(page)


def test_the_readme_lists_every_page_of_the_site():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    linked = set(re.findall(r"\]\(docs/([^)#]+)\)", README.read_text()))
    assert [page for page in nav_pages(config["nav"]) if page not in linked] == []


def test_no_inline_code_nests_single_backticks():
    """`a `b`` renders as broken code (the CLI page's exit codes did): a span holding backticks takes two."""
    for page in [README, *DOCS.rglob("*.md")]:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        text = re.sub(r"`{3,}", "", text)   # a fence named in running text
        text = re.sub(r"``[^`\n](?:[^\n]*?[^`\n])?``", "", text)   # the double-backtick spans, which may hold one
        bad = re.findall(r".{0,40}``.{0,10}", text)
        assert bad == [], f"{page.relative_to(ROOT)}: {bad}"


def test_command_blocks_wrap_on_the_site():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    css = "".join((DOCS / sheet).read_text() for sheet in config.get("extra_css", []))
    assert re.search(r"pre\s*>\s*code\s*\{[^}]*white-space:\s*pre-wrap", css), css
