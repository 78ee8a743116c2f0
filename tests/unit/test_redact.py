"""effbench/redact.py against hand-written expected strings: a URI's password, a secret option's or variable's
value, a secret query parameter become `***`; user names, hosts, ports, paths and every other value stay."""

from __future__ import annotations

import pytest

from effbench import redact


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http://alice:PW@host:5000", "http://alice:***@host:5000"),
        ("https://alice:PW@mlflow.example.org/api?x=1", "https://alice:***@mlflow.example.org/api?x=1"),
        ("postgresql+psycopg2://bob:PW@db:5432/mlflow", "postgresql+psycopg2://bob:***@db:5432/mlflow"),
        ("http://alice:p@ss@host/x@y", "http://alice:***@host/x@y"),  # an unescaped @ in the password
        ("https://ghp_T0KEN@github.com/o/r", "https://***@github.com/o/r"),  # a lone userinfo is a token
        ("could not log to 'http://a:PW@h' (refused); `effbench track x --track http://a:PW@h`",
         "could not log to 'http://a:***@h' (refused); `effbench track x --track http://a:***@h`"),
        ("http://host/a?access_token=T0K&page=2", "http://host/a?access_token=***&page=2"),
        ("https://s3/b/k?X-Amz-Signature=abc#f", "https://s3/b/k?X-Amz-Signature=***#f"),
        # nothing secret: unchanged
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("sqlite:////tmp/m.db", "sqlite:////tmp/m.db"),
        ("file:///home/alice@example/mlruns", "file:///home/alice@example/mlruns"),
        ("mail alice@example.org about a=b", "mail alice@example.org about a=b"),
    ],
)  # fmt: skip
def test_text_hides_passwords_in_uris_and_secret_query_values(given, shown):
    assert redact.text(given) == shown


def test_a_command_line_keeps_its_options_and_hides_their_secrets():
    given = ["effbench", "run", "--smoke", "--track", "http://alice:PW@host:5000", "--token", "T0K",
             "--api-key=K3Y", "--output", "out", "MLFLOW_TRACKING_PASSWORD=PW", "--track-traces"]  # fmt: skip
    assert redact.argv(given) == [
        "effbench", "run", "--smoke", "--track", "http://alice:***@host:5000", "--token", "***",
        "--api-key=***", "--output", "out", "MLFLOW_TRACKING_PASSWORD=***", "--track-traces",
    ]  # fmt: skip
    assert redact.argv(["effbench", "--track=http://bob:PW@h"]) == ["effbench", "--track=http://bob:***@h"]


def test_environment_values_of_secret_names_and_uri_passwords_are_hidden():
    given = {
        "MLFLOW_TRACKING_PASSWORD": "PW",
        "MLFLOW_TRACKING_TOKEN": "T0K",
        "AWS_SECRET_ACCESS_KEY": "S3CR3T",
        "EFFBENCH_TRACK": "http://bob:PW@host:5000",
        "OMP_NUM_THREADS": "2",
        "PWD": "/work",  # the working directory, not a password
        "NCCL_TOKEN_EMPTY": "",
    }
    assert redact.env(given) == {
        "MLFLOW_TRACKING_PASSWORD": "***",
        "MLFLOW_TRACKING_TOKEN": "***",
        "AWS_SECRET_ACCESS_KEY": "***",
        "EFFBENCH_TRACK": "http://bob:***@host:5000",
        "OMP_NUM_THREADS": "2",
        "PWD": "/work",
        "NCCL_TOKEN_EMPTY": "",
    }


def test_any_errors_message_and_traceback_hide_a_uris_password():
    # issue 46: EffbenchError's messages were redacted, any other exception's message (and traceback) was
    # written into results.json as raised, and uploaded with it
    from effbench import results
    from effbench.run import record as rec

    try:
        raise RuntimeError("cannot reach http://alice:S3cret@tracking.local:5000/api")
    except RuntimeError as e:
        outcome = rec.outcome_of(e, received=[], phase="epochs")
    assert outcome.error is not None and "S3cret" not in (outcome.error.message or "")
    assert "http://alice:***@tracking.local:5000" in (outcome.error.message or "")
    assert outcome.error.traceback is None or "S3cret" not in outcome.error.traceback
    # the same for a record read back from a file an older effbench wrote
    old = results.record_of({"schema_version": 1, "status": "failed",
                             "error": {"type": "HTTPError", "message": "GET https://bob:pw2@h/x failed",
                                       "traceback": "Traceback ...\nHTTPError: https://bob:pw2@h/x"}})  # fmt: skip
    assert old.error is not None and "pw2" not in (old.error.message or "") + (old.error.traceback or "")


def test_a_folder_an_older_effbench_wrote_shows_no_secret_when_read():
    # issue 46: the redaction covered what effbench writes from now on; folders written before it still held the
    # password in `command` and env.json's variables, and reports, leaderboards and uploads read them as they were
    from effbench import results

    old = results.record_of({"schema_version": 1, "status": "ok",
                             "command": ["effbench", "run", "--track", "http://alice:pw1@h:5000"],
                             "env": {"env_vars": {"EFFBENCH_TRACK": "http://bob:pw2@h", "MLFLOW_TRACKING_TOKEN": "t0k"}}})  # fmt: skip
    shown = repr(old.model_dump())
    assert "pw1" not in shown and "pw2" not in shown and "t0k" not in shown
    assert old.command == ["effbench", "run", "--track", "http://alice:***@h:5000"]
