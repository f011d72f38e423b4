#!/usr/bin/env python3
"""Failing cases of deploy/check_template.py's least-privilege assertions: the template with one
widening each (a token attribute readable, a write of an attribute the API owns, a read of the
whole item, the whole bucket) must fail them, and the template as it is must pass.

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


def failures_of(t):
    ct.failures.clear()
    ct.check_item_access(t, True)
    ct.check_object_prefixes(t)
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
            statement(t, "TaskRole", "SessionItemRead")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("signingKey")
        self.assertIn("TaskRole: dynamodb:GetItem cannot reach signingKey", self.widened(add))

    def test_a_gateway_reading_connect_url_fails(self):
        def add(t):
            statement(t, "GatewayTaskRole", "SessionLookup")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("connectUrl")
        self.assertIn("GatewayTaskRole: dynamodb:GetItem cannot reach connectUrl", self.widened(add))

    def test_a_read_of_the_whole_item_fails(self):
        def drop(t):
            del statement(t, "TaskRole", "SessionItemRead")["Condition"]
        self.assertIn("TaskRole: dynamodb:GetItem cannot reach signingKey", self.widened(drop))

    def test_a_task_writing_the_project_fails(self):
        def add(t):
            statement(t, "TaskRole", "SessionItemWrite")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("projectId")
        self.assertIn("dynamodb:UpdateItem only of attributes", self.widened(add))

    def test_the_whole_bucket_fails(self):
        def widen(t):
            statement(t, "TaskRole", "ContextArchives")["Resource"] = {"Fn::Sub": "${ContextsBucket.Arn}/*"}
        self.assertIn("TaskRole: no object statement reaches extension-uploads/proj_1/u.zip", self.widened(widen))


if __name__ == "__main__":
    unittest.main()
