"""The tracking child that bounded.call starts (`python -m effbench.track.child`): one MLflow operation, its
request on stdin, its reply a line of JSON on stdout. Apart from bounded.py, which mlflow_store imports."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from effbench.errors import EffbenchError
from effbench.track import mlflow_store
from effbench.track.bounded import Watchdog


def main() -> None:
    reply_to = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever a library prints goes to the stderr the parent drops, never into the reply
    lock = threading.Lock()
    sent: list[bool] = []

    def reply(value: dict[str, Any]) -> None:
        with lock:
            if not sent:
                sent.append(True)
                reply_to.write(json.dumps(value) + "\n")
                reply_to.flush()

    request = json.loads(sys.stdin.read())
    watch = Watchdog(float(request["budget_s"]), reply)

    try:
        # imports MLflow: not timed, it waits on no server (a loaded machine's slow import is not the tracker's)
        mlflow_store.quiet_mlflow(request["args"]["uri"], watch.budget)
        result = mlflow_store.OPS[request["op"]](watch=watch, **request["args"])
    except EffbenchError as e:
        reply({"error": [e.option, e.message]})
    except Exception as e:  # MLflow's, requests' and urllib3's own: the server is down, refused or answered junk
        reply({"failed": mlflow_store.reason(e)})
    else:
        reply({"ok": result})


if __name__ == "__main__":
    main()
