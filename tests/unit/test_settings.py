"""The application's defaults live in `mgstreams.settings`: no other module spells them again, and the two
copies that must stay outside (the stdlib-only query module, the Spark library below the application) agree."""
from __future__ import annotations

import ast
from pathlib import Path

from paths import ROOT

from mgstreams import settings
from spark_bridge import source_options

SETTINGS = {name: value for name, value in vars(settings).items() if name.isupper() and isinstance(value, str)}


def string_literals(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def module_assignments(path: Path) -> dict[str, ast.expr]:
    return {target.id: node.value for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def test_no_application_module_repeats_a_default_or_a_variable_name():
    values = {value: name for name, value in SETTINGS.items() if value != "mgstreams"}   # the program's name
    repeated = sorted((str(path.relative_to(ROOT)), literal, values[literal])
                      for path in (ROOT / "mgstreams").rglob("*.py") if path.name != "settings.py"
                      for literal in string_literals(path) & set(values))
    assert not repeated, f"import these from mgstreams.settings: {repeated}"


def test_the_query_module_reads_the_same_variables_with_the_same_defaults():
    path = ROOT / "query_modules" / "streams.py"
    assigned = module_assignments(path)
    assert ast.literal_eval(assigned["DEFAULT_URL"]) == settings.DEFAULT_URL
    sink = assigned["DEFAULT_SINK"]   # os.environ.get(<variable>, <default>)
    assert [ast.literal_eval(a) for a in sink.args] == [settings.DEFAULT_SINK_ENV, settings.DEFAULT_SINK]
    variables = {s for s in string_literals(path) if s.startswith("MGSTREAMS_") and s.isidentifier()}
    assert variables == {settings.URL_ENV, settings.TOKEN_ENV, settings.TOKEN_FILE_ENV, settings.DEFAULT_SINK_ENV}


def test_the_spark_source_finds_the_state_directory_by_the_same_variable():
    assert source_options.STATE_DIR_ENV == settings.STATE_DIR_ENV
