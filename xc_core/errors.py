"""Errors that are the user's to fix. They carry one line meant to be shown as is (CLI stderr, dashboard)."""


class XcInputError(ValueError):
    """Bad input (file, flag, sample name): the message names the problem and what is accepted."""


class TargetError(RuntimeError):
    """A target could not compile, inspect or run. Caught per target and stored in the report as a value."""
