"""Errors a user can act on. The CLI prints their message, without a stack trace, and exits 2."""


class KappaError(Exception):
    """A failure with a message that says what went wrong and what to do about it."""


class SettingsError(KappaError):
    """A setting is missing or malformed; the message names the setting and what it expects."""


class StackError(KappaError):
    """A component of the local stack could not be started, reached or stopped."""
