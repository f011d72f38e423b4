"""moto's server, with DynamoDB's conditional writes atomic as they are in DynamoDB.

moto serves each request on its own thread and evaluates an UpdateItem's condition and applies
the update without a lock, so two simultaneous conditional writes can both see the old item and
both succeed — which DynamoDB never allows, and which the project's concurrency tests exist to
rule out (`aws::simultaneous_creates_never_exceed_the_projects_concurrency` failed about one run
in eight against plain moto, and not in ten with this lock). Here every DynamoDB request runs
under one lock; other services (SQS long polls above all) keep moto's threads.

    .venv/bin/python tests/py/moto_server.py [HOST] [PORT]    # default 127.0.0.1 0

Prints werkzeug's "Running on http://HOST:PORT" line (on stderr), as moto_server does.
"""

import os
import sys
import threading

import moto.server as moto_server
from werkzeug.serving import run_simple


def main():
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    os.environ.setdefault("MOTO_PORT", str(port))
    app = moto_server.DomainDispatcherApplication(moto_server.create_backend_app)
    dynamodb = threading.Lock()

    def serialised(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            with dynamodb:
                # The whole answer is produced under the lock.
                return list(app(environ, start_response))
        return app(environ, start_response)

    run_simple(
        host,
        port,
        serialised,
        threaded=True,
        request_handler=moto_server.MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
