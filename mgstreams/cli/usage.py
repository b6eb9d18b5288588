"""How the CLI reads its arguments: every usage error shows the usage, and the root's options go anywhere.

Click commands whose every usage error shows the usage, as `Usage: … / Error: …`.

Click raises some parse errors ("Option '--count' requires an argument.")
without their context, and then prints the error alone: the user is not told
the command's usage, and exit-2 errors stop looking alike. The context is
attached where the arguments are parsed, for every command of the CLI.
"""
from __future__ import annotations

import click


class _UsageOnError(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise


class UsageCommand(_UsageOnError, click.Command):
    pass


class UsageGroup(_UsageOnError, click.Group):
    command_class = UsageCommand


class RootGroup(UsageGroup):
    """The root group: its own options (--url, --version, ...) are taken after the subcommand too
    (`mgstreams list --url URL`), as users of kubectl and rpk expect."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoisted(self, list(args)))


def hoisted(group: click.Group, args: list[str]) -> list[str]:
    """`args` with the group's own options moved before the subcommand's name (up to a `--`)."""
    options = {name: p for p in group.params if isinstance(p, click.Option) for name in p.opts + p.secondary_opts}
    command = next((i for i, a in enumerate(args) if a in group.commands), None)
    if command is None:
        return args
    front, rest, i = args[:command], [], command
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        option = options.get(arg.split("=", 1)[0]) if arg.startswith("--") else options.get(arg)
        if option is None:
            rest.append(arg)
            i += 1
        elif "=" in arg or option.is_flag or option.count:
            front.append(arg)
            i += 1
        else:
            front += args[i:i + 2]
            i += 2
    return front + rest
