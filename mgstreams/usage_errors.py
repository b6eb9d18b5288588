"""Click commands whose every usage error shows the usage, as `Usage: … / Error: …`.

Click raises some parse errors ("Option '--count' requires an argument.")
without their context, and then prints the error alone: the user is not told
the command's usage, and exit-2 errors stop looking alike. The context is
attached where the arguments are parsed, for every command of the CLI.
"""
from __future__ import annotations

import click


class _UsageOnError:
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
