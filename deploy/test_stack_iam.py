#!/usr/bin/env python3
"""The template's authority per session, with IAM enforced where moto can enforce it.

The stack is created in a private moto (deploy/moto_stack.py, gateway mode), its roles limited
to their own policies (tests/py/moto_iam.py: the API's, a browser task's, the task API
service's, and the SessionRole that the task API assumes), and then IAM is enforced (`POST
/moto-api/reset-auth`). With its own role, a task reaches no claim, no session item and no
archive, and cannot assume the SessionRole; the task API service's role can, and receives
claims, and the credentials it gets with a session policy naming one archive read that archive
and not another tenant's, and cannot receive claims. The API function's role does neither
(gateway mode: the task API is off the edge). The session-events function's
role publishes to the session-ready topic and sends to its own dead-letter queue alone (not the
claims queue, no session item), and the API's role publishes no event; the mapping on the
sessions stream and the stage's web ACL are as the template says. moto matches S3's, SQS's and
STS's resources, not DynamoDB's or ECS's (tests/py/moto_iam.py), and implements no ECS
UpdateTaskProtection: those resources are asserted on the template by check_template.py.

    .venv/bin/python deploy/test_stack_iam.py
"""

import json
import subprocess
import sys
import unittest
import urllib.request
import uuid
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests/py"))
from support import Moto  # noqa: E402

PYTHON = str(ROOT / ".venv/bin/python")
TASK_ID = "0123456789abcdef0123456789abcdef"


def run_json(*args):
    out = subprocess.run([PYTHON, *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"{args[0]} failed:\n{out.stderr}")
    return json.loads(out.stdout)


class StackIam(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = Moto(wrapped=True)
        try:
            cls.set_up()
        except BaseException:
            cls.moto.close()
            raise

    @classmethod
    def set_up(cls):
        ep = cls.moto.endpoint
        prefix = f"iam-{uuid.uuid4().hex[:8]}"
        cls.stack = run_json("deploy/moto_stack.py", "--endpoint", ep, "--prefix", prefix)
        out = cls.stack["outputs"]
        cls.bucket, cls.queue = out["ContextsBucketName"], out["ClaimsQueueUrl"]
        cls.limited = run_json(
            "tests/py/moto_iam.py", "--endpoint", ep, "--stack", cls.stack["stack"],
            "--principal", f"api={out['ApiFunctionName']}",
            "--principal", f"task={out['TaskDefinitionArn']}",
            "--principal", f"events={out['SessionEventsFunctionName']}",
            "--principal", f"taskapi={out['TaskApiTaskDefinitionArn']}",
            "--role", "session=SessionRole", "--bucket", cls.bucket,
        )
        # The session events' mapping and the API's stages as moto holds them, read before IAM
        # is enforced (moto's Lambda and API Gateway answer SignatureDoesNotMatch to every
        # caller once it is). moto's
        # ListEventSourceMappings matches FunctionName by name only: filtered here.
        lam = cls.moto.client("lambda")
        arn = lam.get_function(FunctionName=out["SessionEventsFunctionName"])["Configuration"]["FunctionArn"]
        (cls.mapping,) = [m for m in lam.list_event_source_mappings()["EventSourceMappings"] if m["FunctionArn"] == arn]
        api_id = out["ApiBaseUrl"].split("//")[1].split(".")[0]
        cls.stages = cls.moto.client("apigateway").get_stages(restApiId=api_id)["item"]
        enforce = urllib.request.Request(f"{ep}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"content-type": "text/plain"})
        urllib.request.urlopen(enforce, timeout=30).read()
        admin = cls.limited["admin"]
        for key in ("p1/c1/profile.tar.gz", "p2/c2/profile.tar.gz"):
            cls.client(admin, "s3").put_object(Bucket=cls.bucket, Key=key, Body=key.encode())

    @classmethod
    def tearDownClass(cls):
        cls.moto.close()

    @classmethod
    def client(cls, creds, service):
        return boto3.client(
            service, endpoint_url=cls.moto.endpoint, region_name="us-east-1",
            aws_access_key_id=creds.get("accessKeyId", creds.get("AccessKeyId")),
            aws_secret_access_key=creds.get("secretAccessKey", creds.get("SecretAccessKey")),
            aws_session_token=creds.get("sessionToken", creds.get("SessionToken")),
            config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
        )

    def refused(self, call):
        with self.assertRaises(ClientError) as e:
            call()
        code = e.exception.response["Error"]["Code"]
        # moto's SQS and DynamoDB answer AccessDenied as an XML body the JSON clients call "403".
        self.assertIn(code, ("AccessDenied", "AccessDeniedException", "403"), e.exception)

    def session_credentials(self, policy):
        """What the task API does: its service's role assumes the SessionRole for one task."""
        sts = self.client(self.limited["principals"]["taskapi"], "sts")
        return sts.assume_role(
            RoleArn=self.stack["taskApi"]["env"]["SESSION_ROLE_ARN"], RoleSessionName=TASK_ID,
            DurationSeconds=3600, Policy=json.dumps(policy),
        )["Credentials"]

    def test_the_task_role_reaches_no_session_data(self):
        task = self.limited["principals"]["task"]
        self.refused(lambda: self.client(task, "sqs").receive_message(QueueUrl=self.queue))
        self.refused(lambda: self.client(task, "dynamodb").get_item(
            TableName=self.stack["apiEnv"]["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": "s1"}},
            ProjectionExpression="sessionId"))
        self.refused(lambda: self.client(task, "s3").get_object(Bucket=self.bucket, Key="p1/c1/profile.tar.gz"))
        self.refused(lambda: self.client(task, "sts").assume_role(
            RoleArn=self.stack["taskApi"]["env"]["SESSION_ROLE_ARN"], RoleSessionName=TASK_ID))
        # What it keeps: the public key.
        sm = self.client(task, "secretsmanager")
        sm.get_secret_value(SecretId=self.stack["taskEnv"]["WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN"])

    def test_the_task_api_receives_claims_and_the_api_function_does_not(self):
        env = self.stack["taskApi"]["env"]
        self.assertNotIn("SESSION_ROLE_ARN", self.stack["apiEnv"])
        self.client(self.limited["principals"]["taskapi"], "sqs").receive_message(QueueUrl=self.queue)
        api = self.limited["principals"]["api"]
        self.refused(lambda: self.client(api, "sqs").receive_message(QueueUrl=self.queue))
        self.refused(lambda: self.client(api, "sts").assume_role(RoleArn=env["SESSION_ROLE_ARN"], RoleSessionName=TASK_ID))
        # It still sends the claims.
        self.client(api, "sqs").send_message(QueueUrl=self.queue, MessageBody="{}")

    def test_a_sessions_credentials_reach_its_archive_alone(self):
        arn = f"arn:aws:s3:::{self.bucket}"
        creds = self.session_credentials({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{arn}/p1/c1/profile.tar.gz"},
            {"Effect": "Allow", "Action": ["sqs:DeleteMessage", "sqs:ChangeMessageVisibility"], "Resource": "*"},
        ]})
        who = self.client(creds, "sts").get_caller_identity()["Arn"]
        self.assertTrue(who.endswith(f":assumed-role/{self.limited['roles']['session']['role']}/{TASK_ID}"), who)
        s3 = self.client(creds, "s3")
        body = s3.get_object(Bucket=self.bucket, Key="p1/c1/profile.tar.gz")["Body"].read()
        self.assertEqual(body, b"p1/c1/profile.tar.gz")
        self.refused(lambda: s3.get_object(Bucket=self.bucket, Key="p2/c2/profile.tar.gz"))
        # The session policy allows more on the queue than the SessionRole: never a receive.
        wide = self.session_credentials({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "sqs:*", "Resource": "*"}]})
        self.refused(lambda: self.client(wide, "sqs").receive_message(QueueUrl=self.queue))

    def test_the_session_events_role_publishes_and_fails_over_alone(self):
        out = self.stack["outputs"]
        events, api = self.limited["principals"]["events"], self.limited["principals"]["api"]
        topic, dlq = out["SessionEventsTopicArn"], out["SessionEventsDeadLetterQueueUrl"]
        self.client(events, "sns").publish(TopicArn=topic, Message='{"kind":"created"}')
        # (Not PutEvents here: moto 5.2.5 hands every event on the default bus to the sweeper's
        # schedule rule too, whose Lambda target it cannot deliver to: HTTP 500.
        # deploy/check_template.py asserts events:PutEvents on the default bus.)
        # The on-failure destination is the mapping's, sent with the function's role: its own
        # dead-letter queue, no other queue (moto matches SQS resources).
        self.client(events, "sqs").send_message(QueueUrl=dlq, MessageBody="{}")
        self.refused(lambda: self.client(events, "sqs").send_message(QueueUrl=self.queue, MessageBody="{}"))
        self.refused(lambda: self.client(events, "dynamodb").get_item(
            TableName=self.stack["apiEnv"]["SESSIONS_TABLE_NAME"], Key={"sessionId": {"S": "s1"}}))
        # The API's role publishes no session event.
        self.refused(lambda: self.client(api, "sns").publish(TopicArn=topic, Message="{}"))

    def test_the_mapping_is_on_the_stream_as_written(self):
        admin = self.limited["admin"]
        out = self.stack["outputs"]
        m = self.mapping
        table = self.client(admin, "dynamodb").describe_table(TableName=out["SessionsTableName"])["Table"]
        self.assertEqual(m["EventSourceArn"], table["LatestStreamArn"])
        self.assertEqual(table["StreamSpecification"]["StreamViewType"], "NEW_AND_OLD_IMAGES")
        self.assertEqual(m["FunctionResponseTypes"], ["ReportBatchItemFailures"])
        self.assertTrue(m["BisectBatchOnFunctionError"])
        self.assertEqual(m["DestinationConfig"]["OnFailure"]["Destination"].split(":")[-1], out["SessionEventsDeadLetterQueueUrl"].rsplit("/", 1)[-1])
        # The web ACL moto_stack.py made with the plain API is the stage's.
        self.assertEqual([s.get("webAclArn") for s in self.stages], [out["moto:ApiWebAclArn"]])


if __name__ == "__main__":
    unittest.main()
