"""Secrets out of everything effbench prints, records, reports or uploads: the one place that says what a
secret looks like, used by every writer (the recorded command, env.json's variables, errors, terminal lines).

    text("could not log to http://alice:pw@host:5000")   -> "could not log to http://alice:***@host:5000"
    argv(["effbench", "--token", "t0k", "--password=pw"])  -> ["effbench", "--token", "***", "--password=***"]
    env({"MLFLOW_TRACKING_TOKEN": "t0k", "EFFBENCH_TRACK": "http://bob:pw@host"})
        -> {"MLFLOW_TRACKING_TOKEN": "***", "EFFBENCH_TRACK": "http://bob:***@host"}

Only what is shown passes through here: the tracker connects with the URI as given. Pure, imports nothing of
effbench.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

SHOWN = "***"
"""What a secret is replaced with."""

# A name that holds a secret by convention (MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN,
# AWS_SECRET_ACCESS_KEY, --api-key, a presigned URL's X-Amz-Signature). Not PWD: that is the working directory.
_SECRET_NAME = re.compile(
    r"PASSWORD|PASSWD|PASSPHRASE|TOKEN|SECRET|CREDENTIAL|SIGNATURE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY", re.IGNORECASE
)
# scheme://userinfo@ (RFC 3986 3.2): the authority ends at the first / ? # (or a blank in free text), and the
# userinfo at its last @, so a password holding an unescaped @ is hidden whole.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s]*)@")
# ?token=... or &access_token=... in a URL's query
_QUERY = re.compile(r"([?&]([^=&#\s]*)=)([^&#\s]*)")


def secret_name(name: str) -> bool:
    """Whether a variable, option or query parameter of this name holds a secret (its value never shown)."""
    return bool(_SECRET_NAME.search(name.replace("-", "_")))


def _userinfo(m: re.Match[str]) -> str:
    user, colon, _ = m.group(2).partition(":")
    # user:password keeps the user; a lone userinfo (https://TOKEN@host) is likely a token: hidden whole
    return f"{m.group(1)}{user}:{SHOWN}@" if colon else f"{m.group(1)}{SHOWN}@"


def text(s: str) -> str:
    """`s` with the password of every URI in it (scheme://user:***@host) and every secret query value hidden."""
    if "@" in s:
        s = _USERINFO.sub(_userinfo, s)
    if "=" in s:
        s = _QUERY.sub(lambda m: m.group(1) + SHOWN if secret_name(m.group(2)) and m.group(3) else m.group(0), s)
    return s


def argv(args: Sequence[str]) -> list[str]:
    """A command line as recorded: the value after a secret option (--token X), of NAME=VALUE with a secret
    NAME (--password=X, MLFLOW_TRACKING_TOKEN=X), and every URI's password hidden."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        name, eq, _ = arg.partition("=")
        if hide_next and not arg.startswith("-"):
            out.append(SHOWN)
        elif eq and secret_name(name):
            out.append(f"{name}={SHOWN}")
        else:
            out.append(text(arg))
        hide_next = arg.startswith("-") and not eq and secret_name(arg)
    return out


def env(variables: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as recorded: a secret name's value hidden, the others' URIs without passwords."""
    return {k: SHOWN if secret_name(k) and v else text(v) for k, v in variables.items()}
