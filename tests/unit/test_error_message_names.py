"""Every option and variable an error message tells the user to use exists (issue 35, friction 2: host refusals
said `mgstreams serve --allow-host`, and `serve` has no such option).

The messages are collected from the code: the text of every `raise`, and of every call of an error class or of
`fail`/`warning`/`echo` (f-strings' literal parts, and the `*_ENV` constants they interpolate). Each `--option`
must be in the `--help` of the command the message names (`mgstreams serve --x`), else of some command; each
`MGSTREAMS_*` variable must be one the code reads and docs/reference/configuration.md lists.
"""
from __future__ import annotations

import ast
import functools
import re

from click.testing import CliRunner
from paths import ROOT

from mgstreams.cli import cli

PACKAGES = ("mgstreams", "stream_registry", "spark_bridge", "query_modules")
CALLS = {"fail", "warning", "warn", "error", "echo", "secho", "UsageError", "BadParameter"}
# Options of other tools that messages quote as such ("as kafka-consumer-groups --by-duration").
FOREIGN = re.compile(r"(?:kafka-consumer-groups|spark-submit|pyspark|rpk|mgconsole)((?: [\w.=-]+)*? )(--[a-z][a-z0-9-]*)")


@functools.cache
def _constants() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                        and isinstance(node.value.value, str):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            found[target.id] = node.value.value
    return found


def _message_nodes(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            yield node.exc
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name.endswith(("Error", "Exception")) or name in CALLS:
                yield node


def _text(node: ast.AST, constants: dict[str, str]) -> str:
    parts = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            parts.append(sub.value)
        elif isinstance(sub, ast.Name) and re.fullmatch(r"[A-Z_]+_ENV", sub.id) and sub.id in constants:
            parts.append(constants[sub.id])
    return " ".join(parts)


@functools.cache
def messages() -> list[tuple[str, str]]:
    constants = _constants()
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in _message_nodes(ast.parse(path.read_text())):
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", _text(node, constants)))
    return found


def _commands(group=cli, path=()):
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


def _help() -> dict[tuple[str, ...], str]:
    runner = CliRunner()
    texts = {}
    for path, _command in _commands():
        result = runner.invoke(cli, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        texts[path] = result.output
    return texts


def test_every_option_a_message_names_is_in_the_help_of_its_command():
    helps = _help()
    wrong = []
    named = 0
    for where, text in messages():
        text = FOREIGN.sub(" ", text)
        for match in re.finditer(r"(?:mgstreams((?: [a-z][a-z-]*)*))?((?: --[a-z][a-z0-9-]*(?: [A-Z]+)?)+)", text):
            words, options = match.group(1), re.findall(r"--[a-z][a-z0-9-]*", match.group(2))
            path = tuple((words or "").split())
            while path and path not in helps:        # "mgstreams serve again": the command is the known prefix
                path = path[:-1]
            for option in options:
                named += 1
                scope = [helps[path]] if match.group(1) is not None else list(helps.values())
                if not any(re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", h) for h in scope):
                    wrong.append(f"{where}: {'mgstreams ' + ' '.join(path) + ' ' if path else ''}{option}")
    assert named >= 20, "the collector lost the messages' options"
    wrong = sorted(set(wrong))
    assert not wrong, f"messages name options their command does not have: {wrong}"


def test_every_variable_a_message_names_is_one_the_settings_read_and_the_docs_list():
    documented = set(re.findall(r"^\| `(MGSTREAMS_[A-Z_]+)` \|",
                                (ROOT / "docs" / "reference" / "configuration.md").read_text(), re.M))
    read = set()   # every name the code holds as a string of its own (a constant, a dict's value), not in a message
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            read |= {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
                     and isinstance(n.value, str) and re.fullmatch(r"MGSTREAMS_[A-Z_]+", n.value)}
    named = {(where, name) for where, text in messages() for name in re.findall(r"MGSTREAMS_[A-Z][A-Z_]*[A-Z]", text)}
    assert len(named) >= 8, named
    wrong = sorted(f"{where}: {name}" for where, name in named if name not in documented or name not in read)
    assert not wrong, f"messages name variables that nothing reads or the docs do not list: {wrong}"
