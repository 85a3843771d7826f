"""The command-line parser of the entry tools: a bad option is one line, not argparse's usage block."""
from __future__ import annotations

import argparse

from harness.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors raise harness.errors.UsageError (the tools print it with
    `harness.errors.report`, exit status 2); subcommand parsers are of this class too."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")
