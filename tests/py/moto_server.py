"""moto's server, with DynamoDB's conditional writes atomic as they are in DynamoDB.

moto serves each request on its own thread and evaluates an UpdateItem's condition and applies
the update without a lock, so two simultaneous conditional writes can both see the old item and
both succeed — which DynamoDB never allows, and which the project's concurrency tests exist to
rule out (`aws::simultaneous_creates_never_exceed_the_projects_concurrency` failed about one run
in eight against plain moto, and not in ten with this lock). Here every DynamoDB request runs
under one lock; other services (SQS long polls above all) keep moto's threads.

With IAM enforced (`POST /moto-api/reset-auth`), credentials made by an AssumeRole with a
session policy (`Policy`: what the task API hands a task for one session) are also held to that
policy, as AWS holds them (the role's policies intersected with it): moto keeps the policy but
never evaluates it. As moto does for identity policies, only S3's, SQS's and STS's requests are
matched against their resource ARNs; for the other services the session policy's statements
are matched by action alone, and conditions as moto treats them (mostly as met).

    .venv/bin/python tests/py/moto_server.py [HOST] [PORT]    # default 127.0.0.1 0

Prints werkzeug's "Running on http://HOST:PORT" line (on stderr), as moto_server does.
"""

import json
import os
import sys
import threading

import moto.server as moto_server
from moto.iam import access_control
from moto.sts.models import sts_backends
from werkzeug.serving import run_simple

# The services whose requests moto authorises against a resource ARN of their own
# (tests/py/moto_iam.py says the same of identity policies).
SCOPED_BY_MOTO = ("s3", "sqs", "sts")


def session_policy(key):
    """The session policy of the assumed role whose access key `key` is, if any."""
    if not isinstance(key, access_control.AssumedRoleAccessKey):
        return None
    for role in sts_backends[key.account_id][key.partition].assumed_roles:
        if role.access_key_id == key._access_key_id:
            return role.policy
    return None


def held_to_session_policies():
    """moto's authorisation, then the caller's session policy (AWS: the intersection)."""
    checked = access_control.IAMRequestBase.check_action_permitted

    def check_action_permitted(self, resource):
        checked(self, resource)
        policy = session_policy(self._access_key)
        if policy is None or self._action == "sts:GetCallerIdentity":
            return
        doc = json.loads(policy)
        if self._action.split(":")[0] not in SCOPED_BY_MOTO:
            # moto checks these against "*": the session policy's resources cannot match.
            statements = doc["Statement"] if isinstance(doc["Statement"], list) else [doc["Statement"]]
            doc = {**doc, "Statement": [{**st, "Resource": "*"} for st in statements]}
            resource = "*"
        verdict = access_control.IAMPolicy(json.dumps(doc)).is_action_permitted(self._action, resource)
        if verdict != access_control.PermissionResult.PERMITTED:
            self._raise_access_denied()

    access_control.IAMRequestBase.check_action_permitted = check_action_permitted


def main():
    host = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1"
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    os.environ.setdefault("MOTO_PORT", str(port))
    held_to_session_policies()
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
