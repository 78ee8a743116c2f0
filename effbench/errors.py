"""The one user-facing error type: a single line that names the option and the fix.

The CLI turns every EffbenchError into `error: <option>: <message>` on stderr and exit code 2,
with no traceback. Anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any

from effbench import redact
from effbench.fmt import printable


class EffbenchError(Exception):
    """A bad input or an unusable environment, explained in one line.

    `option` is what the user typed (`--batch-size`, `--data-dir`, a file path), or None when no
    single option is to blame. `message` says what is wrong and how to fix it. Both are kept printable
    (fmt.printable): a file or folder name found on disk with an escape sequence in it is shown, not obeyed; a
    URI's password (a tracking server's, say) is shown as *** (redact.text).
    """

    exit_code = 2

    def __init__(self, option: str | None, message: str) -> None:
        self.option = printable(option) if option is not None else None
        self.message = printable(redact.text(" ".join(message.split())))  # always one line
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.option}: {self.message}" if self.option else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # as it is, not through __init__ again: a worker process's error reaches the parent unchanged
        return (_rebuild, (type(self), self.option, self.message))


def _rebuild(cls: type[EffbenchError], option: str | None, message: str) -> EffbenchError:
    error = cls.__new__(cls)
    error.option, error.message = option, message
    Exception.__init__(error, str(error))
    return error
