#!/usr/bin/env python3
"""The packaged Lambda functions, each invoked through the AWS Lambda Runtime Interface Emulator
(no container), against moto. Run by scripts/test.sh after scripts/lambda.sh:

    .venv/bin/python tests/py/lambda_rie.py --dist DIR --admin-binary PATH

DIR holds the zips scripts/lambda.sh wrote. Each zip's `bootstrap` is unpacked and started by
.venv/bin/aws-lambda-rie (from the aws-sam-cli wheel; scripts/install-test-deps.sh) exactly as
Lambda's provided.al2023 runtime starts it, with the function's environment; the test POSTs
events to the emulator's invoke endpoint and checks the answers:

  - wallcrawler-api-lambda, API Gateway proxy events: REST `GET /v1/projects` (the stage prefix
    `/prod` removed) lists the project; REST `POST /v1/sessions` starts an ECS task in moto and
    answers 201 PENDING (CREATE_WAIT_SECONDS=1, no controller); HTTP API 2.0
    `GET /prod/v1/sessions/<id>` finds it; an unknown key gets 401;
  - wallcrawler-authorizer-lambda, REQUEST authorizer events: Allow with the project as context
    for the key, `Unauthorized` for an unknown one;
  - wallcrawler-task-events-lambda, an EventBridge "ECS Task State Change" for that session's
    task, STOPPED: the session becomes FAILED with the stop reason and gets endedAt;
  - wallcrawler-sweeper-lambda, a scheduled event: a new PENDING session whose claim's deadline
    passed becomes TIMED_OUT ("no browser was available in time") with endedAt;
  - wallcrawler-session-events-lambda, the sessions stream's records of all the above (read
    from moto's stream): created and ended for both sessions on an SQS queue subscribed to the
    topic and on an EventBridge rule's queue, no token in any of them.

The project and its API key are made by the real `wallcrawler-control-plane admin` against moto.
No API key appears in any function's log. Exits 1 with a clear message on any miss.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from pathlib import Path

from support import (
    ROOT,
    WAIT,
    Failure,
    Moto,
    free_port,
    logger,
    port_open,
    report,
    s,
    stop,
    token_key_secrets,
    wait_until,
)

log = logger("lambda-rie")
RIE = ROOT / ".venv/bin/aws-lambda-rie"
API_ID = "abc123"
HOST = f"{API_ID}.execute-api.us-east-1.amazonaws.com"


def rest_event(method: str, path: str, key: str, body: dict | None = None) -> dict:
    """An API Gateway REST API (payload 1.0) Lambda proxy event, stage `prod`."""
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"x-wc-api-key": key, "content-type": "application/json", "Host": HOST},
        "multiValueHeaders": {"x-wc-api-key": [key], "content-type": ["application/json"], "Host": [HOST]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "r1",
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/prod{path}",
            "accountId": "123456789012",
            "stage": "prod",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "198.51.100.1"},
            "apiId": API_ID,
        },
        "body": json.dumps(body) if body is not None else None,
        "isBase64Encoded": False,
    }


def http_api_event(method: str, raw_path: str, key: str) -> dict:
    """An API Gateway HTTP API (payload 2.0) event, named stage `prod`."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": "",
        "headers": {"x-wc-api-key": key, "host": HOST},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": API_ID,
            "domainName": HOST,
            "domainPrefix": API_ID,
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "198.51.100.1", "userAgent": "rie-test"},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "prod",
            "time": "21/Nov/2026:12:00:00 +0000",
            "timeEpoch": 1795262400000,
        },
        "isBase64Encoded": False,
    }


def authorizer_event(key: str) -> dict:
    """An API Gateway REQUEST authorizer event (REST API)."""
    return {
        "type": "REQUEST",
        "methodArn": f"arn:aws:execute-api:us-east-1:123456789012:{API_ID}/prod/GET/v1/projects",
        "resource": "/v1/projects",
        "path": "/v1/projects",
        "httpMethod": "GET",
        "headers": {"X-WC-API-Key": key, "Accept": "application/json"},
        "queryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "path": "/prod/v1/projects",
            "accountId": "123456789012",
            "resourceId": "r1",
            "stage": "prod",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "198.51.100.1"},
            "resourcePath": "/v1/projects",
            "httpMethod": "GET",
            "apiId": API_ID,
        },
    }


def scheduled_event() -> dict:
    """An EventBridge schedule's event, as the sweeper's rule sends it (its body is ignored)."""
    return {
        "version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-11-21T12:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/wallcrawler-sweeper"], "detail": {},
    }


def task_stopped_event(cluster_arn: str, task_arn: str, session_id: str) -> dict:
    """An EventBridge "ECS Task State Change" event for a task that stopped."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "ECS Task State Change",
        "source": "aws.ecs",
        "account": "123456789012",
        "time": "2026-11-21T12:00:00Z",
        "region": "us-east-1",
        "resources": [task_arn],
        "detail": {
            "clusterArn": cluster_arn,
            "taskArn": task_arn,
            "lastStatus": "STOPPED",
            "desiredStatus": "STOPPED",
            "startedBy": session_id,
            "stopCode": "TaskFailedToStart",
            "stoppedReason": "CannotPullContainerError: pull access denied",
            "containers": [{"name": "controller", "lastStatus": "STOPPED"}],
        },
    }


class Function:
    """One packaged function under the Runtime Interface Emulator."""

    def __init__(self, zip_path: Path, env: dict[str, str], workdir: Path) -> None:
        self.name = zip_path.stem
        task_root = workdir / self.name
        with zipfile.ZipFile(zip_path) as z:
            if z.namelist() != ["bootstrap"]:
                raise Failure(f"{zip_path} holds {z.namelist()}, not just bootstrap")
            z.extract("bootstrap", task_root)
        bootstrap = task_root / "bootstrap"
        bootstrap.chmod(0o755)  # zipfile drops the mode; Lambda runs the file as unzipped by its own tools
        self.port = free_port()
        self.log_path = workdir / f"{self.name}.log"
        self.log_file = open(self.log_path, "wb")
        # Only what Lambda would give the function, plus its configuration.
        child_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LAMBDA_TASK_ROOT": str(task_root), **env,
                     "AWS_LAMBDA_FUNCTION_NAME": self.name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
                     "AWS_LAMBDA_FUNCTION_TIMEOUT": "30"}
        self.proc = subprocess.Popen(
            [str(RIE), "--runtime-interface-emulator-address", f"127.0.0.1:{self.port}",
             "--runtime-api-address", f"127.0.0.1:{free_port()}", str(bootstrap)],
            cwd=task_root,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )
        wait_until(f"the emulator for {self.name} to listen", lambda: self._alive() and port_open(self.port))

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise Failure(f"aws-lambda-rie for {self.name} exited ({self.proc.returncode}): {self.log()[-2000:]}")
        return True

    def invoke(self, event: dict) -> dict:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/2015-03-31/functions/function/invocations",
            data=json.dumps(event).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            raise Failure(f"{self.name}: the emulator answered {e.code} ({e.read()[:300]!r}); the function did not start?") from None
        try:
            return json.loads(body)
        except ValueError:
            raise Failure(f"{self.name} answered non-JSON: {body[:500]!r}") from None

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        stop(self.proc)
        self.log_file.close()


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def proxy_answer(name: str, answer: dict) -> tuple[int, object]:
    """(statusCode, JSON body) of an API Gateway proxy answer."""
    if "statusCode" not in answer:
        raise Failure(f"{name} gave no proxy answer: {answer}")
    body = answer.get("body") or ""
    return answer["statusCode"], json.loads(body) if body else None


def run(dist: Path, admin_binary: str) -> None:
    started = time.monotonic()
    moto = Moto()
    functions: list[Function] = []
    try:
        dynamo, ecs, ec2 = moto.client("dynamodb"), moto.client("ecs"), moto.client("ec2")
        suffix = uuid.uuid4().hex[:12]
        tables = {
            "SESSIONS_TABLE_NAME": (f"sessions-{suffix}", "sessionId"),
            "PROJECTS_TABLE_NAME": (f"projects-{suffix}", "projectId"),
            "API_KEYS_TABLE_NAME": (f"api-keys-{suffix}", "apiKeyHash"),
            "CONTEXTS_TABLE_NAME": (f"contexts-{suffix}", "contextId"),
        }
        for var, (name, key) in tables.items():
            args = {
                "TableName": name,
                "AttributeDefinitions": [{"AttributeName": key, "AttributeType": "S"}],
                "KeySchema": [{"AttributeName": key, "KeyType": "HASH"}],
                "BillingMode": "PAY_PER_REQUEST",
            }
            if var == "SESSIONS_TABLE_NAME":
                # The session-events function's input (the template's stream, NEW_AND_OLD_IMAGES).
                args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
                args["AttributeDefinitions"] += [
                    {"AttributeName": "projectId", "AttributeType": "S"},
                    {"AttributeName": "createdAt", "AttributeType": "S"},
                ]
                args["AttributeDefinitions"] += [
                    {"AttributeName": "status", "AttributeType": "S"},
                    {"AttributeName": "expiresAt", "AttributeType": "N"},
                    {"AttributeName": "contextId", "AttributeType": "S"},
                ]
                args["GlobalSecondaryIndexes"] = [{
                    "IndexName": "projectId-createdAt-index",
                    "KeySchema": [{"AttributeName": "projectId", "KeyType": "HASH"},
                                  {"AttributeName": "createdAt", "KeyType": "RANGE"}],
                    "Projection": {"ProjectionType": "ALL"},
                }, {
                    "IndexName": "status-expiresAt-index",
                    "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"},
                                  {"AttributeName": "expiresAt", "KeyType": "RANGE"}],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }, {
                    # DELETE /v1/contexts/{id} queries it (the template's contextId-index).
                    "IndexName": "contextId-index",
                    "KeySchema": [{"AttributeName": "contextId", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["endedAt"]},
                }]
            dynamo.create_table(**args)
        # Projects' concurrency slots: a counter and one item per holder (the template's SlotsTable).
        dynamo.create_table(
            TableName=f"slots-{suffix}",
            AttributeDefinitions=[{"AttributeName": "projectId", "AttributeType": "S"},
                                  {"AttributeName": "sessionId", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "projectId", "KeyType": "HASH"},
                       {"AttributeName": "sessionId", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
        )
        tables["SLOTS_TABLE_NAME"] = (f"slots-{suffix}", "projectId")
        table_env = {var: name for var, (name, _) in tables.items()}
        bucket = f"contexts-{suffix}"
        moto.client("s3").create_bucket(Bucket=bucket)
        _, signing_secret, public_secret = token_key_secrets()
        sm = moto.client("secretsmanager")
        secret_arn = sm.create_secret(Name=f"jwt-signing-{suffix}", SecretString=signing_secret)["ARN"]
        public_arn = sm.create_secret(Name=f"jwt-public-{suffix}", SecretString=public_secret)["ARN"]
        cluster_arn = ecs.create_cluster(clusterName=f"cluster-{suffix}")["cluster"]["clusterArn"]
        family = f"wallcrawler-controller-{suffix}"
        ecs.register_task_definition(
            family=family, networkMode="awsvpc", requiresCompatibilities=["FARGATE"], cpu="1024", memory="2048",
            containerDefinitions=[{"name": "controller", "image": "wallcrawler-controller:test", "memory": 2048, "essential": True}],
        )
        subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"][0]["SubnetId"]
        group = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["default"]}])["SecurityGroups"][0]["GroupId"]

        # The project and its key, made by the operator's own tool.
        admin_env = {"PATH": os.environ.get("PATH", ""), **moto.env(), **table_env}

        def admin(*args: str) -> str:
            out = subprocess.run([admin_binary, "admin", *args], env=admin_env, capture_output=True, text=True, timeout=WAIT)
            if out.returncode != 0:
                raise Failure(f"admin {args[0]} failed ({out.returncode}): {out.stderr[-1000:]}")
            return out.stdout.strip()

        project_id = admin("create-project", "--name", "RIE test", "--concurrency", "5")
        api_key = admin("create-key", "--project-id", project_id)
        expect(api_key.startswith("wc_"), "admin create-key printed no key")

        fn_env = {
            **moto.env(),
            "AWS_MAX_ATTEMPTS": "1",
            **table_env,
            "CONTEXTS_BUCKET_NAME": bucket,
            "ECS_CLUSTER": cluster_arn.rsplit("/", 1)[-1],
            "ECS_TASK_DEFINITION": family,
            "ECS_SUBNETS": subnet,
            "ECS_SECURITY_GROUPS": group,
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN": secret_arn,
            "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN": public_arn,
            "CREATE_WAIT_SECONDS": "1",
        }
        workdir = Path(tempfile.mkdtemp(prefix="lambda-rie-"))

        def start(name: str) -> Function:
            zip_path = dist / f"{name}.zip"
            expect(zip_path.is_file(), f"no {zip_path}: run scripts/lambda.sh first")
            f = Function(zip_path, fn_env, workdir)
            functions.append(f)
            return f

        # The API function.
        t0 = time.monotonic()
        api = start("wallcrawler-api-lambda")
        status, projects = proxy_answer(api.name, api.invoke(rest_event("GET", "/v1/projects", api_key)))
        expect(status == 200 and [p.get("id") for p in projects] == [project_id],
               f"GET /v1/projects answered {status} {projects}, want 200 and the project")
        status, created = proxy_answer(api.name, api.invoke(rest_event("POST", "/v1/sessions", api_key, {"timeout": 120})))
        expect(status == 201 and created.get("status") == "PENDING" and created.get("projectId") == project_id,
               f"POST /v1/sessions answered {status} {created}, want 201 PENDING")
        session_id = created["id"]
        status, got = proxy_answer(api.name, api.invoke(http_api_event("GET", f"/prod/v1/sessions/{session_id}", api_key)))
        expect(status == 200 and got.get("id") == session_id, f"GET /v1/sessions/<id> (HTTP API) answered {status} {got}")
        status, refused = proxy_answer(api.name, api.invoke(rest_event("GET", "/v1/projects", "wc_" + "0" * 64)))
        expect(status == 401, f"an unknown key got {status} {refused}, want 401")
        item = dynamo.get_item(TableName=table_env["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": session_id}}, ConsistentRead=True)["Item"]
        task_arn = s(item, "ecsTaskArn")
        expect(bool(task_arn), f"the created session has no ecsTaskArn: {item}")
        tasks = ecs.describe_tasks(cluster=cluster_arn, tasks=[task_arn])["tasks"]
        expect(len(tasks) == 1 and tasks[0].get("startedBy") == session_id, f"no ECS task started by {session_id}: {tasks}")
        log(f"{api.name}: 4 API Gateway events answered as expected ({time.monotonic() - t0:.1f} s with its cold start)")

        # The authorizer.
        t0 = time.monotonic()
        auth = start("wallcrawler-authorizer-lambda")
        allow = auth.invoke(authorizer_event(api_key))
        statement = (allow.get("policyDocument") or {}).get("Statement") or [{}]
        expect(statement[0].get("Effect") == "Allow" and (allow.get("context") or {}).get("projectId") == project_id,
               f"the authorizer answered {allow}, want Allow with the project as context")
        deny = auth.invoke(authorizer_event("wc_" + "1" * 64))
        expect(deny.get("errorMessage") == "Unauthorized", f"the authorizer answered {deny} for an unknown key, want Unauthorized")
        log(f"{auth.name}: Allow and Unauthorized ({time.monotonic() - t0:.1f} s)")

        # The task-state function.
        t0 = time.monotonic()
        events = start("wallcrawler-task-events-lambda")
        outcome = events.invoke(task_stopped_event(cluster_arn, task_arn, session_id))
        expect(outcome == {"outcome": f'Failed("{session_id}")'}, f"the task-state function answered {outcome}")
        item = dynamo.get_item(TableName=table_env["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": session_id}}, ConsistentRead=True)["Item"]
        expect(s(item, "internalStatus") == "FAILED" and bool(s(item, "endedAt"))
               and "CannotPullContainerError" in (s(item, "terminationReason") or ""),
               f"after the stopped task the session is {s(item, 'internalStatus')}, endedAt={s(item, 'endedAt')}")
        log(f"{events.name}: the session FAILED with the stop reason and endedAt ({time.monotonic() - t0:.1f} s)")

        # The sweeper: a scheduled event ends a session whose claim's deadline passed.
        t0 = time.monotonic()
        status, created = proxy_answer(api.name, api.invoke(rest_event("POST", "/v1/sessions", api_key, {"timeout": 120})))
        expect(status == 201 and created.get("status") == "PENDING", f"POST /v1/sessions answered {status} {created}")
        stranded = created["id"]
        dynamo.update_item(TableName=table_env["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": stranded}},
                           UpdateExpression="SET claimDeadline = :d",
                           ExpressionAttributeValues={":d": {"N": str(int(time.time()) - 1)}})
        sweeper = start("wallcrawler-sweeper-lambda")
        summary = sweeper.invoke(scheduled_event())
        expect(summary.get("ended") == 1 and summary.get("unserved") == 1, f"the sweeper answered {summary}, want 1 ended")
        item = dynamo.get_item(TableName=table_env["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": stranded}}, ConsistentRead=True)["Item"]
        expect(s(item, "internalStatus") == "TIMED_OUT" and bool(s(item, "endedAt"))
               and s(item, "terminationReason") == "no browser was available in time",
               f"after the sweep the session is {s(item, 'internalStatus')}, endedAt={s(item, 'endedAt')}")
        log(f"{sweeper.name}: the stranded session TIMED_OUT with endedAt ({time.monotonic() - t0:.1f} s)")

        # The session-events function: the stream's records so far, as the event source mapping
        # hands them over.
        t0 = time.monotonic()
        sqs, sns, bus_client = moto.client("sqs"), moto.client("sns"), moto.client("events")

        def queue() -> tuple[str, str]:
            url = sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex}")["QueueUrl"]
            return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

        topic = sns.create_topic(Name=f"session-ready-{suffix}")["TopicArn"]
        topic_queue, topic_queue_arn = queue()
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=topic_queue_arn, Attributes={"RawMessageDelivery": "true"})
        bus = f"sessions-{suffix}"
        bus_client.create_event_bus(Name=bus)
        bus_client.put_rule(Name=f"session-events-{suffix}", EventBusName=bus,
                            EventPattern=json.dumps({"source": ["wallcrawler.sessions"]}))
        rule_queue, rule_queue_arn = queue()
        bus_client.put_targets(Rule=f"session-events-{suffix}", EventBusName=bus, Targets=[{"Id": "q", "Arn": rule_queue_arn}])
        streams = moto.client("dynamodbstreams")
        stream_arn = dynamo.describe_table(TableName=table_env["SESSIONS_TABLE_NAME"])["Table"]["LatestStreamArn"]
        records = []
        for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]:
            it = streams.get_shard_iterator(StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while it:
                page = streams.get_records(ShardIterator=it)
                if not page["Records"]:
                    break
                for r in page["Records"]:
                    r["dynamodb"].pop("ApproximateCreationDateTime", None)
                    records.append(r)
                it = page.get("NextShardIterator")
        # The items hold no token (the API mints it when it answers), so neither do the records:
        # no signingKey, and nothing shaped like a JWT (its header's base64 starts "eyJ").
        items = [dynamo.get_item(TableName=table_env["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": i}},
                                 ConsistentRead=True)["Item"] for i in (session_id, stranded)]
        expect(not any("signingKey" in i or "connectUrl" in i for i in items), "a session item holds a token")
        records_text = json.dumps(records, default=str)
        expect("signingKey" not in records_text and "eyJ" not in records_text, "a stream record holds a token")
        fn_env.update({"SESSION_EVENTS_TOPIC_ARN": topic, "SESSION_EVENTS_BUS_NAME": bus})
        session_events = start("wallcrawler-session-events-lambda")
        answer = session_events.invoke({"Records": records})
        expect(answer == {"batchItemFailures": []}, f"the session-events function answered {answer}")

        def bodies(url: str) -> list[dict]:
            out = []
            while True:
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                if not got:
                    return out
                for m in got:
                    out.append(json.loads(m["Body"]))
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

        # In order per session; the two sessions' events interleave (a batch's calls hold one
        # event per session each, crates/control-plane/src/session_events.rs).
        on_topic, on_rule = bodies(topic_queue), bodies(rule_queue)
        for sid in [session_id, stranded]:
            want = [f"{sid}:created", f"{sid}:ended"]
            got = [e.get("eventId") for e in on_topic if e.get("sessionId") == sid]
            expect(got == want, f"the topic's queue got {got} for {sid}, want {want}")
        expect(len(on_topic) == 4, f"the topic's queue got {on_topic}, want 4 events")
        def by_id(events: list) -> list:
            return sorted(events, key=lambda e: e.get("eventId", ""))

        expect(by_id([e.get("detail") for e in on_rule]) == by_id(on_topic), f"the rule's queue got {on_rule}, want the same events")
        for text in [json.dumps(on_topic), json.dumps(on_rule)]:
            expect("eyJ" not in text and "signingKey" not in text, "a token in a session event")
        log(f"{session_events.name}: {len(records)} stream records, created and ended of both sessions on the topic and the bus ({time.monotonic() - t0:.1f} s)")

        for f in functions:
            text = f.log()
            expect(api_key not in text, f"{f.name}'s log contains the API key")
            expect("START RequestId" in text, f"{f.name}'s log shows no invocation through the emulator")
        log(f"passed in {time.monotonic() - started:.1f} s")
    except Exception:
        for f in functions:
            text = f.log()
            if "api_key" in locals():
                text = text.replace(locals()["api_key"], "<api key>")
            print(f"[lambda-rie] {f.name} log (last 40 lines):\n" + "\n".join(text.splitlines()[-40:]), file=sys.stderr)
        raise
    finally:
        for f in functions:
            f.close()
        moto.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dist", required=True, type=Path, help="the directory scripts/lambda.sh wrote the zips to")
    ap.add_argument("--admin-binary", required=True, help="a wallcrawler-control-plane binary (its admin commands)")
    a = ap.parse_args()
    if not RIE.is_file():
        print(f"[lambda-rie] FAILED: {RIE} missing: run scripts/install-test-deps.sh", file=sys.stderr)
        return 1
    return report("lambda-rie", lambda: run(a.dist, a.admin_binary))


if __name__ == "__main__":
    sys.exit(main())
