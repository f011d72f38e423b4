#!/usr/bin/env python3
"""Failing cases of deploy/check_template.py's least-privilege assertions: the template with one
widening each (a token attribute readable, a write of an attribute the API owns, a read of the
whole item, the whole bucket; the task role reaching session data, another principal able to
assume the session role or to receive claims, the session role receiving, a second route
without the authorizer, the task API's route moved, the tasks without TASK_API_URL) must fail
them, and the template as it is must pass.

    .venv/bin/python deploy/test_check_template.py
"""

import copy
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_template as ct  # noqa: E402


def resolved():
    return ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"ConnectMode": "gateway"})


def statement(t, role, sid):
    return next(st for st in ct.statements(t, role) if st.get("Sid") == sid)


def add_statement(t, role, st):
    ct.props(t, role)["Policies"][0]["PolicyDocument"]["Statement"].append(st)


def task_env(t):
    (c,) = ct.props(t, "TaskDefinition")["ContainerDefinitions"]
    return {e["Name"]: e["Value"] for e in c["Environment"]}


def failures_of(t):
    ct.failures.clear()
    ct.check_item_access(t, True)
    ct.check_object_prefixes(t)
    ct.check_task_authority(t)
    ct.check_task_api(t, task_env(t), ct.props(t, "ApiFunction")["Environment"]["Variables"])
    ct.check_routes(t)
    out = list(ct.failures)
    ct.failures.clear()
    return out


class LeastPrivilege(unittest.TestCase):
    def setUp(self):
        self.t = resolved()

    def widened(self, change):
        t = copy.deepcopy(self.t)
        change(t)
        got = failures_of(t)
        self.assertTrue(got, "the widened template passed")
        return "\n".join(got)

    def test_the_template_passes(self):
        self.assertEqual(failures_of(self.t), [])

    def test_a_task_reading_the_token_fails(self):
        def add(t):
            statement(t, "SessionRole", "SessionItemRead")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("signingKey")
        self.assertIn("SessionRole: dynamodb:GetItem cannot reach signingKey", self.widened(add))

    def test_a_gateway_reading_connect_url_fails(self):
        def add(t):
            statement(t, "GatewayTaskRole", "SessionLookup")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("connectUrl")
        self.assertIn("GatewayTaskRole: dynamodb:GetItem cannot reach connectUrl", self.widened(add))

    def test_a_read_of_the_whole_item_fails(self):
        def drop(t):
            del statement(t, "SessionRole", "SessionItemRead")["Condition"]
        self.assertIn("SessionRole: dynamodb:GetItem cannot reach signingKey", self.widened(drop))

    def test_a_task_writing_the_project_fails(self):
        def add(t):
            statement(t, "SessionRole", "SessionItemWrite")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("projectId")
        self.assertIn("dynamodb:UpdateItem only of attributes", self.widened(add))

    def test_the_whole_bucket_fails(self):
        def widen(t):
            statement(t, "SessionRole", "ContextArchives")["Resource"] = {"Fn::Sub": "${ContextsBucket.Arn}/*"}
        self.assertIn("SessionRole: no object statement reaches extension-uploads/proj_1/u.zip", self.widened(widen))

    def test_a_task_role_reaching_the_sessions_table_fails(self):
        def add(t):
            add_statement(t, "TaskRole", copy.deepcopy(statement(t, "SessionRole", "SessionItemRead")))
        got = self.widened(add)
        self.assertIn("TaskRole: SessionItemRead reaches no table, bucket, queue or ECS task (['dynamodb:GetItem'])", got)
        self.assertIn("TaskRole: SessionItemRead names no table, bucket, queue or cluster", got)

    def test_a_task_role_protecting_tasks_fails(self):
        def add(t):
            add_statement(t, "TaskRole", copy.deepcopy(statement(t, "SessionRole", "ScaleInProtection")))
        self.assertIn("TaskRole: ScaleInProtection reaches no table, bucket, queue or ECS task (['ecs:UpdateTaskProtection'])", self.widened(add))

    def test_a_task_role_receiving_claims_fails(self):
        def add(t):
            add_statement(
                t, "TaskRole", {"Sid": "Claims", "Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": {"Fn::GetAtt": ["ClaimsQueue", "Arn"]}}
            )
        self.assertIn("ClaimsQueue: only ApiFunctionRole receives claims (['ApiFunctionRole', 'TaskRole'])", self.widened(add))

    def test_a_session_role_receiving_claims_fails(self):
        def add(t):
            statement(t, "SessionRole", "SettleClaim")["Action"].append("sqs:ReceiveMessage")
        got = self.widened(add)
        self.assertIn("SessionRole: cannot ReceiveMessage (the API hands one claim to one task)", got)
        self.assertIn("ClaimsQueue: only ApiFunctionRole receives claims (['ApiFunctionRole', 'SessionRole'])", got)

    def test_a_task_trusted_by_the_session_role_fails(self):
        def add(t):
            ct.props(t, "SessionRole")["AssumeRolePolicyDocument"]["Statement"].append(
                {"Effect": "Allow", "Principal": {"AWS": {"Fn::GetAtt": ["TaskRole", "Arn"]}}, "Action": "sts:AssumeRole"}
            )
        self.assertIn("SessionRole: trusted by ApiFunctionRole alone", self.widened(add))

    def test_a_task_role_assuming_the_session_role_fails(self):
        def add(t):
            add_statement(
                t, "TaskRole", {"Sid": "Chain", "Effect": "Allow", "Action": "sts:AssumeRole", "Resource": ct.role_arn_sub(t, "SessionRole")}
            )
        self.assertIn("SessionRole: only ApiFunctionRole may assume it (['ApiFunctionRole', 'TaskRole'])", self.widened(add))

    def test_a_second_route_without_the_authorizer_fails(self):
        def open_up(t):
            m = ct.props(t, "V1ProxyMethod")
            m["AuthorizationType"] = "NONE"
            del m["AuthorizerId"]
        self.assertIn("only POST /v1/internal/{proxy+} is without the API-key authorizer", self.widened(open_up))

    def test_the_task_api_elsewhere_fails(self):
        def move(t):
            ct.props(t, "InternalMethod")["ResourceId"] = {"Ref": "V1ProxyResource"}
        self.assertIn(
            "only POST /v1/internal/{proxy+} is without the API-key authorizer ([('InternalMethod', '/v1/{proxy+}', 'POST')])",
            self.widened(move),
        )

    def test_tasks_without_the_task_api_fail(self):
        def drop(t):
            (c,) = ct.props(t, "TaskDefinition")["ContainerDefinitions"]
            c["Environment"] = [e for e in c["Environment"] if e["Name"] != "TASK_API_URL"]
        self.assertIn("TaskDefinition: TASK_API_URL is the API's execute-api URL with its stage (None)", self.widened(drop))


if __name__ == "__main__":
    unittest.main()
