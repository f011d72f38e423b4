#!/usr/bin/env python3
"""Failing cases of deploy/check_template.py's least-privilege assertions: the template with one
widening each (a token attribute readable, a write of an attribute the API owns, a read of the
whole item, the whole bucket; the task role reaching session data, another principal able to
assume the session role or to receive claims, the session role receiving, a second route
without the authorizer, the task API's route moved, the tasks without TASK_API_URL) must fail
them, and the template as it is must pass. Likewise the session events' plumbing and the edge
(Step 15): each piece taken away or widened (the stream, its only reader, the topic, the
mapping's on-failure destination and bounds, the web ACL's association, rules and numbers, the
distribution's caching) fails them. And (Step 19) a NamePrefix longer than a name built from it
allows, a name of a type NAME_LIMITS does not know, and a documented deploy command without
CAPABILITY_NAMED_IAM fail them. And (issue 44) the managed proxy pools' secret read on `*`, by
another role, or without the parameter set, its variable elsewhere, and a claims queue without
encryption or keeping dead claims for long fail them. And (issue 40, items 4, 6-8) rate defaults
under 20 requests per second, a per-address rule or a managed group that sees the task API (or
leaves out more than it), a rule trusting X-Forwarded-For or a distribution that does not write
the address it saw, sampled requests or unredacted logging, one stream batch per shard or a
filter passing usage items and lease renewals (or dropping an event), a plain private subnet
list, and a documented image build without --platform for the tasks' architecture fail them. And
(Step 19 item 2) the task API back on the edge or wider than itself fails them: an API Gateway
resource under /v1/internal or a task API variable or grant on the API function in gateway
mode, a public or internet-facing task API, a plain HTTP listener, a forward beyond POST
/v1/internal/*, the load balancer or the service open to more than the group in front of it, the
tasks' TASK_API_URL or TASK_API_ADDRESS elsewhere, TaskApiRole beyond or short of the code's
calls, the image's entrypoint instead of the task-api command, long polls cut by a timeout, and a
deployment naming a conditional method in its DependsOn (direct mode's cases beside).

    .venv/bin/python deploy/test_check_template.py
"""

import copy
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_template as ct  # noqa: E402


def resolved(mode="gateway"):
    return ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"ConnectMode": mode})


def statement(t, role, sid):
    return next(st for st in ct.statements(t, role) if st.get("Sid") == sid)


def add_statement(t, role, st):
    ct.props(t, role)["Policies"][0]["PolicyDocument"]["Statement"].append(st)


def task_env(t):
    (c,) = ct.props(t, "TaskDefinition")["ContainerDefinitions"]
    return {e["Name"]: e["Value"] for e in c["Environment"]}


def failures_of(t, gateway=True):
    ct.failures.clear()
    ct.check_item_access(t, gateway)
    ct.check_object_prefixes(t)
    ct.check_task_authority(t, gateway)
    api_env = ct.props(t, "ApiFunction")["Environment"]["Variables"]
    ct.check_task_api(t, task_env(t), api_env, gateway)
    ct.check_routes(t, gateway)
    ct.check_token_secrets(t, gateway)
    if gateway:
        ct.check_task_api_service(t, task_env(t), api_env)
    out = list(ct.failures)
    ct.failures.clear()
    return out


class TemplateChanges(unittest.TestCase):
    """The cases' frame: the template (`template`) changed one way must fail check_template's
    assertions (`check`); `how` picks the template and the assertions, as each class reads it."""

    def template(self, *how, **named):
        raise NotImplementedError

    def check(self, t, *how, **named):
        raise NotImplementedError

    def changed(self, change, *how, **named):
        """The failures of a copy of the template changed by `change`, joined (none fails)."""
        t = copy.deepcopy(self.template(*how, **named))
        change(t)
        got = self.check(t, *how, **named)
        self.assertTrue(got, "the changed template passed")
        return "\n".join(got)

    def assertFails(self, change, *expected, **how):
        """Each of `expected` among the failures of the template changed by `change`."""
        got = self.changed(change, **how)
        for e in expected:
            self.assertIn(e, got)


class GatewayChanges(TemplateChanges):
    """Gateway mode's template against every assertion of failures_of."""

    def setUp(self):
        self.t = resolved()

    def template(self):
        return self.t

    def check(self, t):
        return failures_of(t)


class LeastPrivilege(GatewayChanges):

    def test_the_template_passes(self):
        self.assertEqual(failures_of(self.t), [])

    def test_a_task_reading_the_token_fails(self):
        def add(t):
            statement(t, "SessionRole", "SessionItemRead")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("signingKey")
        self.assertIn("SessionRole: dynamodb:GetItem cannot reach signingKey", self.changed(add))

    def test_a_gateway_reading_connect_url_fails(self):
        def add(t):
            statement(t, "GatewayTaskRole", "SessionLookup")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("connectUrl")
        self.assertIn("GatewayTaskRole: dynamodb:GetItem cannot reach connectUrl", self.changed(add))

    def test_a_read_of_the_whole_item_fails(self):
        def drop(t):
            del statement(t, "SessionRole", "SessionItemRead")["Condition"]
        self.assertIn("SessionRole: dynamodb:GetItem cannot reach signingKey", self.changed(drop))

    def test_a_task_writing_the_project_fails(self):
        def add(t):
            statement(t, "SessionRole", "SessionItemWrite")["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"].append("projectId")
        self.assertIn("dynamodb:UpdateItem only of attributes", self.changed(add))

    def test_the_whole_bucket_fails(self):
        def widen(t):
            statement(t, "SessionRole", "ContextArchives")["Resource"] = {"Fn::Sub": "${ContextsBucket.Arn}/*"}
        self.assertIn("SessionRole: no object statement reaches extension-uploads/proj_1/u.zip", self.changed(widen))

    def test_a_task_role_reaching_the_sessions_table_fails(self):
        def add(t):
            add_statement(t, "TaskRole", copy.deepcopy(statement(t, "SessionRole", "SessionItemRead")))
        self.assertFails(
            add,
            "TaskRole: SessionItemRead reaches no table, bucket, queue or ECS task (['dynamodb:GetItem'])",
            "TaskRole: SessionItemRead names no table, bucket, queue or cluster",
        )

    def test_a_task_role_protecting_tasks_fails(self):
        def add(t):
            add_statement(t, "TaskRole", copy.deepcopy(statement(t, "SessionRole", "ScaleInProtection")))
        self.assertIn("TaskRole: ScaleInProtection reaches no table, bucket, queue or ECS task (['ecs:UpdateTaskProtection'])", self.changed(add))

    def test_a_task_role_receiving_claims_fails(self):
        def add(t):
            add_statement(
                t, "TaskRole", {"Sid": "Claims", "Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": {"Fn::GetAtt": ["ClaimsQueue", "Arn"]}}
            )
        self.assertIn("ClaimsQueue: only TaskApiRole receives claims (['TaskApiRole', 'TaskRole'])", self.changed(add))

    def test_a_session_role_receiving_claims_fails(self):
        def add(t):
            statement(t, "SessionRole", "SettleClaim")["Action"].append("sqs:ReceiveMessage")
        self.assertFails(
            add,
            "SessionRole: cannot ReceiveMessage (the task API hands one claim to one task)",
            "ClaimsQueue: only TaskApiRole receives claims (['SessionRole', 'TaskApiRole'])",
        )

    def test_a_task_trusted_by_the_session_role_fails(self):
        def add(t):
            ct.props(t, "SessionRole")["AssumeRolePolicyDocument"]["Statement"].append(
                {"Effect": "Allow", "Principal": {"AWS": {"Fn::GetAtt": ["TaskRole", "Arn"]}}, "Action": "sts:AssumeRole"}
            )
        self.assertIn("SessionRole: trusted by TaskApiRole alone", self.changed(add))

    def test_a_task_role_assuming_the_session_role_fails(self):
        def add(t):
            add_statement(
                t, "TaskRole", {"Sid": "Chain", "Effect": "Allow", "Action": "sts:AssumeRole", "Resource": ct.role_arn_sub(t, "SessionRole")}
            )
        self.assertIn("SessionRole: only TaskApiRole may assume it (['TaskApiRole', 'TaskRole'])", self.changed(add))

    def test_a_second_route_without_the_authorizer_fails(self):
        def open_up(t):
            m = ct.props(t, "V1ProxyMethod")
            m["AuthorizationType"] = "NONE"
            del m["AuthorizerId"]
        self.assertIn("gateway mode: every method behind the API-key authorizer ([('V1ProxyMethod', '/v1/{proxy+}', 'ANY')])",
                      self.changed(open_up))

    def test_the_dashboards_route_open_to_any_method_fails(self):
        def any_method(t):
            ct.props(t, "DashboardMethod")["HttpMethod"] = "ANY"
        self.assertIn("gateway mode: every method behind the API-key authorizer ([('DashboardMethod', '/dashboard', 'ANY')])",
                      self.changed(any_method))

    def test_tasks_without_the_task_api_fail(self):
        def drop(t):
            (c,) = ct.props(t, "TaskDefinition")["ContainerDefinitions"]
            c["Environment"] = [e for e in c["Environment"] if e["Name"] != "TASK_API_URL"]
        self.assertIn("TaskDefinition: TASK_API_URL is https:// on the connect host, the API's CONNECT_BASE_URL's (None;", self.changed(drop))


class DirectModeTaskApi(TemplateChanges):
    """Direct mode keeps the task API on the API function, behind API Gateway: its one route
    without the authorizer, its variables and grants on the API function's role."""

    def setUp(self):
        self.t = resolved("direct")

    def template(self):
        return self.t

    def check(self, t):
        return failures_of(t, gateway=False)

    def test_the_template_passes(self):
        self.assertEqual(failures_of(self.t, gateway=False), [])

    def test_a_second_route_without_the_authorizer_fails(self):
        def open_up(t):
            m = ct.props(t, "V1ProxyMethod")
            m["AuthorizationType"] = "NONE"
            del m["AuthorizerId"]
        self.assertIn("only POST /v1/internal/{proxy+} is without the API-key authorizer", self.changed(open_up))

    def test_the_dashboard_elsewhere_fails(self):
        def move(t):
            ct.props(t, "DashboardMethod")["ResourceId"] = {"Ref": "V1ProxyResource"}
        self.assertIn(
            "only POST /v1/internal/{proxy+} is without the API-key authorizer "
            "([('DashboardMethod', '/v1/{proxy+}', 'GET'), ('InternalMethod', '/v1/internal/{proxy+}', 'POST')])",
            self.changed(move),
        )

    def test_the_task_api_elsewhere_fails(self):
        def move(t):
            ct.props(t, "InternalMethod")["ResourceId"] = {"Ref": "V1ProxyResource"}
        self.assertIn(
            "only POST /v1/internal/{proxy+} is without the API-key authorizer ([('InternalMethod', '/v1/{proxy+}', 'POST')])",
            self.changed(move),
        )

    def test_tasks_without_the_task_api_fail(self):
        def drop(t):
            (c,) = ct.props(t, "TaskDefinition")["ContainerDefinitions"]
            c["Environment"] = [e for e in c["Environment"] if e["Name"] != "TASK_API_URL"]
        self.assertIn("TaskDefinition: TASK_API_URL is the API's execute-api URL with its stage (None)", self.changed(drop))

    def test_the_function_without_the_task_api_fails(self):
        def drop(t):
            del ct.props(t, "ApiFunction")["Environment"]["Variables"]["SESSION_ROLE_ARN"]
        self.assertIn("ApiFunction: SESSION_ROLE_ARN = {'Fn::GetAtt': ['SessionRole', 'Arn']} (None)", self.changed(drop))

    def test_another_role_assuming_the_session_role_fails(self):
        def add(t):
            add_statement(t, "SweeperFunctionRole",
                          {"Sid": "Chain", "Effect": "Allow", "Action": "sts:AssumeRole", "Resource": ct.role_arn_sub(t, "SessionRole")})
        self.assertIn("SessionRole: only ApiFunctionRole may assume it (['ApiFunctionRole', 'SweeperFunctionRole'])", self.changed(add))


def ingress_rule(t, group):
    return ct.props(t, group)["SecurityGroupIngress"][0]


def task_api_container(t):
    (c,) = ct.props(t, "TaskApiTaskDefinition")["ContainerDefinitions"]
    return c


def set_env(t, td, name, value):
    (c,) = ct.props(t, td)["ContainerDefinitions"]
    c["Environment"] = [e for e in c["Environment"] if e["Name"] != name] + ([{"Name": name, "Value": value}] if value is not None else [])


class TaskApiOffTheEdge(GatewayChanges):
    """Step 19 item 2: in gateway mode the task API is an always-on ECS service behind an
    internal load balancer; each way back onto the edge, or wider than the task API, fails."""

    def test_an_internal_resource_on_api_gateway_fails(self):
        def add(t):
            t["Resources"]["InternalResource"] = {"Type": "AWS::ApiGateway::Resource", "Properties": {
                "RestApiId": {"Ref": "RestApi"}, "ParentId": {"Ref": "V1Resource"}, "PathPart": "internal"}}
        self.assertIn("gateway mode: no API Gateway resource under /v1/internal (the task API is TaskApiService's) (['/v1/internal'])",
                      self.changed(add))

    def test_the_function_with_the_task_api_fails(self):
        def add(t):
            ct.props(t, "ApiFunction")["Environment"]["Variables"]["TASKS_TABLE_NAME"] = {"Ref": "TasksTable"}
        self.assertIn("ApiFunction: no TASKS_TABLE_NAME in gateway mode", self.changed(add))

    def test_the_function_receiving_claims_fails(self):
        def add(t):
            add_statement(t, "ApiFunctionRole", copy.deepcopy(statement(t, "TaskApiRole", "ClaimsForTasks")))
        self.assertFails(
            add,
            "ApiFunctionRole: no sqs:ReceiveMessage on ClaimsQueue in gateway mode",
            "ClaimsQueue: only TaskApiRole receives claims (['ApiFunctionRole', 'TaskApiRole'])",
        )

    def test_a_public_service_fails(self):
        def widen(t):
            vpc = ct.props(t, "TaskApiService")["NetworkConfiguration"]["AwsvpcConfiguration"]
            vpc["AssignPublicIp"] = "ENABLED"
            vpc["Subnets"] = {"Ref": "SubnetIds"}
        self.assertIn("TaskApiService: in PrivateSubnetIds, no public IP, in TaskApiSecurityGroup alone", self.changed(widen))

    def test_an_internet_facing_load_balancer_fails(self):
        def widen(t):
            ct.props(t, "TaskApiLoadBalancer")["Scheme"] = "internet-facing"
        self.assertIn("TaskApiLoadBalancer: an internal (Scheme internal) application load balancer", self.changed(widen))

    def test_a_plain_http_listener_fails(self):
        def widen(t):
            ln = ct.props(t, "TaskApiListener")
            ln.update(Protocol="HTTP", Port=80)
            del ln["Certificates"], ln["SslPolicy"]
        self.assertIn("TaskApiListener: HTTPS 443 on TaskApiLoadBalancer with ConnectCertificateArn", self.changed(widen))

    def test_a_listener_forwarding_everything_fails(self):
        def widen(t):
            ct.props(t, "TaskApiListener")["DefaultActions"] = [{"Type": "forward", "TargetGroupArn": {"Ref": "TaskApiTargetGroup"}}]
        self.assertIn("TaskApiListener: anything but the task API's routes is a fixed 404", self.changed(widen))

    def test_a_wider_path_fails(self):
        def widen(t):
            ct.props(t, "TaskApiListenerRule")["Conditions"][0]["PathPatternConfig"]["Values"] = ["/v1/*"]
        self.assertIn("TaskApiListenerRule: forwards only POST /v1/internal/* (path-pattern and http-request-method)", self.changed(widen))

    def test_any_method_fails(self):
        def widen(t):
            ct.props(t, "TaskApiListenerRule")["Conditions"].pop()
        self.assertIn("TaskApiListenerRule: forwards only POST /v1/internal/*", self.changed(widen))

    def test_a_second_rule_fails(self):
        def add(t):
            r = copy.deepcopy(t["Resources"]["TaskApiListenerRule"])
            r["Properties"]["Priority"] = 2
            r["Properties"]["Conditions"] = [{"Field": "path-pattern", "PathPatternConfig": {"Values": ["/*"]}}]
            t["Resources"]["TaskApiHealthRule"] = r
        self.assertIn("TaskApiListener: one listener rule (['TaskApiListenerRule', 'TaskApiHealthRule'])", self.changed(add))

    def test_the_load_balancer_open_to_a_range_fails(self):
        def widen(t):
            rule = ingress_rule(t, "TaskApiLoadBalancerSecurityGroup")
            del rule["SourceSecurityGroupId"]
            rule["CidrIp"] = {"Ref": "VpcCidr"}
        self.assertIn("TaskApiLoadBalancerSecurityGroup: admits tcp 443 from TaskSecurityGroup alone", self.changed(widen))

    def test_the_service_open_to_the_tasks_fails(self):
        def widen(t):
            ingress_rule(t, "TaskApiSecurityGroup")["SourceSecurityGroupId"] = {"Fn::GetAtt": ["TaskSecurityGroup", "GroupId"]}
        self.assertIn("TaskApiSecurityGroup: admits tcp 8080 from TaskApiLoadBalancerSecurityGroup alone", self.changed(widen))

    def test_tasks_without_a_way_to_the_load_balancer_fail(self):
        def narrow(t):
            ct.props(t, "TaskSecurityGroup")["SecurityGroupEgress"] = [{"IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "CidrIp": "0.0.0.0/0"}]
        self.assertIn("TaskSecurityGroup: its egress reaches the task API's load balancer on tcp 443", self.changed(narrow))

    def test_tasks_calling_the_load_balancer_by_its_own_name_fail(self):
        def change(t):
            set_env(t, "TaskDefinition", "TASK_API_URL", {"Fn::Sub": "https://${TaskApiLoadBalancer.DNSName}"})
        self.assertIn("TaskDefinition: TASK_API_URL is https:// on the connect host", self.changed(change))

    def test_tasks_still_on_the_edge_fail(self):
        def change(t):
            set_env(t, "TaskDefinition", "TASK_API_URL",
                    {"Fn::Sub": "https://${RestApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}"})
            set_env(t, "TaskDefinition", "TASK_API_ADDRESS", None)
        self.assertFails(
            change,
            "TaskDefinition: TASK_API_URL is https:// on the connect host",
            "TaskDefinition: TASK_API_ADDRESS is the internal load balancer's DNS name (None)",
        )

    def test_an_address_other_than_the_internal_load_balancer_fails(self):
        def change(t):
            set_env(t, "TaskDefinition", "TASK_API_ADDRESS", {"Fn::GetAtt": ["ConnectLoadBalancer", "DNSName"]})
        self.assertIn("TaskDefinition: TASK_API_ADDRESS is the internal load balancer's DNS name", self.changed(change))

    def test_a_task_api_role_reaching_the_bucket_fails(self):
        def add(t):
            add_statement(t, "TaskApiRole", {"Sid": "Archives", "Effect": "Allow", "Action": "s3:GetObject",
                                             "Resource": {"Fn::Sub": "${ContextsBucket.Arn}/*"}})
        self.assertFails(
            add,
            "TaskApiRole: exactly",
            "extra [('s3:GetObject', 'ContextsBucket')]",
            "TaskApiRole: only calls the task API's code makes (['s3:GetObject'])",
        )

    def test_a_task_api_role_on_every_table_fails(self):
        def widen(t):
            statement(t, "TaskApiRole", "Sessions")["Resource"] = "*"
        self.assertIn("TaskApiRole: exactly", self.changed(widen))

    def test_a_task_api_role_without_the_session_role_fails(self):
        def drop(t):
            sts = ct.props(t, "TaskApiRole")["Policies"][0]["PolicyDocument"]["Statement"]
            sts[:] = [s for s in sts if s.get("Sid") != "SessionCredentials"]
        self.assertFails(
            drop,
            "missing [('sts:AssumeRole', 'SessionRole')]",
            "TaskApiRole: allows every call of crates/control-plane/src/aws/broker.rs (['sts:AssumeRole'])",
        )

    def test_the_image_entrypoint_fails(self):
        def change(t):
            c = task_api_container(t)
            del c["EntryPoint"]
            c["Command"] = ["run"]
        self.assertIn("TaskApiTaskDefinition: runs the control plane's binary's task-api command (None ['run'])", self.changed(change))

    def test_a_service_without_the_task_api_variables_fails(self):
        def change(t):
            set_env(t, "TaskApiTaskDefinition", "SESSION_ROLE_ARN", None)
        self.assertIn("TaskApiTaskDefinition: SESSION_ROLE_ARN = {'Fn::GetAtt': ['SessionRole', 'Arn']} (None)", self.changed(change))

    def test_a_service_with_the_managed_proxies_fails(self):
        def change(t):
            set_env(t, "TaskApiTaskDefinition", "MANAGED_PROXIES_SECRET_ARN", {"Ref": "ManagedProxiesSecretArn"})
        self.assertIn("TaskApiTaskDefinition: nothing beyond the API function's variables and its own", self.changed(change))

    def test_a_service_with_another_table_fails(self):
        def change(t):
            set_env(t, "TaskApiTaskDefinition", "SESSIONS_TABLE_NAME", {"Ref": "ContextsTable"})
        self.assertIn("TaskApiTaskDefinition: SESSIONS_TABLE_NAME as the API function's", self.changed(change))

    def test_a_short_stop_timeout_fails(self):
        def change(t):
            task_api_container(t)["StopTimeout"] = 10
        self.assertIn("TaskApiTaskDefinition: StopTimeout (10) lets a long poll (25 s) finish", self.changed(change))

    def test_a_short_idle_timeout_fails(self):
        def change(t):
            attrs = ct.props(t, "TaskApiLoadBalancer")["LoadBalancerAttributes"]
            next(a for a in attrs if a["Key"] == "idle_timeout.timeout_seconds")["Value"] = "20"
        self.assertIn("TaskApiLoadBalancer: idle timeout (20 s) above the longest long poll (25 s)", self.changed(change))


class ConditionalDependencies(unittest.TestCase):
    """A DependsOn on a resource of a false condition is a template CloudFormation rejects: the
    deployment waits for direct mode's InternalMethod through a handle, never by name."""

    def test_the_deployment_naming_the_internal_method_fails(self):
        t = raw()
        (dep,) = ct.resources(t, "AWS::ApiGateway::Deployment")
        deps = t["Resources"][dep]["DependsOn"]
        t["Resources"][dep]["DependsOn"] = [d for d in deps if d != "InternalRoutesReady"] + ["InternalMethod"]
        ct.failures.clear()
        ct.check_redeploy(t)
        got = "\n".join(ct.failures)
        ct.failures.clear()
        self.assertIn("DependsOn no resource of a condition (invalid where it is false: ['InternalMethod'])", got)

    def test_the_deployment_not_waiting_for_the_internal_method_fails(self):
        t = raw()
        t["Resources"]["InternalRoutesReady"]["Metadata"] = {}
        ct.failures.clear()
        ct.check_redeploy(t)
        got = "\n".join(ct.failures)
        ct.failures.clear()
        self.assertIn("DependsOn every method and gateway response (['InternalMethod'])", got)


def edge_failures_of(t, cloudfront=False, gateway=True):
    """check_template's session-events and edge assertions on `t` (resolved in gateway mode, or
    direct mode with `gateway` false)."""
    ct.failures.clear()
    ct.check_session_events(t, lambda role, action, res: ct.check(ct.allowed(t, role, action, res), f"{role}: allows {action} on {res}"))
    ct.check_edge(t, cloudfront, gateway)
    out = list(ct.failures)
    ct.failures.clear()
    return out


def rule(t, name):
    return next(r for r in ct.props(t, "ApiWebAcl")["Rules"] if r["Name"] == name)


class EventsAndEdge(TemplateChanges):
    """Issue 28: each piece of the session events' plumbing and of the edge, taken away or
    widened, fails check_template."""

    def setUp(self):
        self.t = resolved()

    def template(self, cloudfront=False):
        return self.t if not cloudfront else ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"EdgeCloudFront": "true"})

    def check(self, t, cloudfront=False):
        return edge_failures_of(t, cloudfront)

    def test_the_template_passes(self):
        self.assertEqual(edge_failures_of(self.t), [])
        cf = ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"EdgeCloudFront": "true"})
        self.assertEqual(edge_failures_of(cf, True), [])

    def test_no_stream_fails(self):
        def drop(t):
            del ct.props(t, "SessionsTable")["StreamSpecification"]
        self.assertIn("SessionsTable: a stream for the session events (None)", self.changed(drop))

    def test_another_reader_of_the_stream_fails(self):
        def add(t):
            add_statement(t, "ApiFunctionRole", copy.deepcopy(statement(t, "SessionEventsFunctionRole", "ReadStream")))
        self.assertIn("SessionsTable: only SessionEventsFunctionRole reads its stream (['ApiFunctionRole', 'SessionEventsFunctionRole'])",
                      self.changed(add))

    def test_a_pattern_reaching_the_stream_fails(self):
        def add(t):
            add_statement(t, "SweeperFunctionRole",
                          {"Sid": "Streams", "Effect": "Allow", "Action": "dynamodb:Get*", "Resource": {"Fn::Sub": "${SessionsTable.Arn}/stream/*"}})
        self.assertIn("SessionsTable: only SessionEventsFunctionRole reads its stream (['SessionEventsFunctionRole', 'SweeperFunctionRole'])",
                      self.changed(add))

    def test_no_topic_fails(self):
        def drop(t):
            del t["Resources"]["SessionEventsTopic"]
        self.assertFails(
            drop,
            "SessionEventsTopic: named ${NamePrefix}-session-ready (the seeds')",
        )

    def test_an_unencrypted_topic_fails(self):
        def drop(t):
            del ct.props(t, "SessionEventsTopic")["KmsMasterKeyId"]
        self.assertIn("SessionEventsTopic: encrypted with a KMS key", self.changed(drop))

    def test_no_mapping_fails(self):
        def drop(t):
            del t["Resources"]["SessionEventsMapping"]
        self.assertIn("SessionEventsMapping: on the sessions table's stream", self.changed(drop))

    def test_no_on_failure_destination_fails(self):
        def drop(t):
            del ct.props(t, "SessionEventsMapping")["DestinationConfig"]
        self.assertIn("SessionEventsMapping: on failure -> SessionEventsDeadLetterQueue", self.changed(drop))

    def test_whole_batch_retries_fail(self):
        def drop(t):
            del ct.props(t, "SessionEventsMapping")["FunctionResponseTypes"]
        self.assertIn("SessionEventsMapping: ReportBatchItemFailures", self.changed(drop))

    def test_endless_retries_fail(self):
        def drop(t):
            del ct.props(t, "SessionEventsMapping")["MaximumRetryAttempts"]
            del ct.props(t, "SessionEventsMapping")["MaximumRecordAgeInSeconds"]
        self.assertFails(
            drop,
            "SessionEventsMapping: bounded retries (MaximumRetryAttempts 0-10)",
            "SessionEventsMapping: bounded record age (MaximumRecordAgeInSeconds)",
        )

    def test_a_dead_letter_queue_without_alarm_fails(self):
        def drop(t):
            del t["Resources"]["SessionEventsDeadLetterAlarm"]
        self.assertIn("SessionEventsDeadLetterQueue: an alarm on its messages", self.changed(drop))

    def test_a_processor_publishing_anywhere_fails(self):
        def widen(t):
            statement(t, "SessionEventsFunctionRole", "PublishTopic")["Action"] = ["sns:Publish", "sns:Subscribe"]
        self.assertIn("SessionEventsFunctionRole: nothing beyond its work", self.changed(widen))

    def test_no_web_acl_association_fails(self):
        def drop(t):
            del t["Resources"]["ApiWebAclAssociation"]
        self.assertIn("ApiWebAclAssociation: the web ACL on the API stage", self.changed(drop))

    def test_a_fixed_rate_limit_fails(self):
        def fix(t):
            rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]["Limit"] = 2000
        self.assertIn("ApiWebAcl: rate-per-ip's limit is a parameter", self.changed(fix))

    def test_no_rate_per_bb_api_key_fails(self):
        def drop(t):
            ct.props(t, "ApiWebAcl")["Rules"].remove(rule(t, "rate-per-bb-api-key"))
        self.assertIn("ApiWebAcl: a rate-based rule per x-bb-api-key value", self.changed(drop))

    def test_no_known_bad_inputs_fails(self):
        def drop(t):
            ct.props(t, "ApiWebAcl")["Rules"].remove(rule(t, "aws-known-bad-inputs"))
        self.assertIn("ApiWebAcl: AWSManagedRulesKnownBadInputsRuleSet, its own actions", self.changed(drop))

    def test_the_common_rule_sets_8_kb_body_limit_fails(self):
        def drop(t):
            del rule(t, "aws-common")["Statement"]["ManagedRuleGroupStatement"]["RuleActionOverrides"]
        self.assertIn("ApiWebAcl: the common rule set's 8 KB body limit only counts", self.changed(drop))

    def test_a_body_limit_other_than_the_apis_fails(self):
        def change(t):
            rule(t, "body-size")["Statement"]["RegexMatchStatement"]["RegexString"] = ct.above_regex(1048576)
        self.assertIn("ApiWebAcl: blocks a Content-Length above the API's largest body (4259840", self.changed(change))

    def test_x_forwarded_for_behind_cloudfront_fails(self):
        def change(t):
            r = rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]
            r["AggregateKeyType"] = "FORWARDED_IP"
            r["ForwardedIPConfig"] = {"HeaderName": "X-Forwarded-For", "FallbackBehavior": "MATCH"}
        self.assertFails(
            change,
            "ApiWebAcl: rate-per-ip does not trust X-Forwarded-For (a client writes its first address)",
            "ApiWebAcl: rate-per-ip keyed on a forwarded address only behind CloudFront, on the header its function writes",
            cloudfront=True,
        )

    def test_a_caching_distribution_fails(self):
        def change(t):
            ct.props(t, "ApiDistribution")["DistributionConfig"]["DefaultCacheBehavior"]["CachePolicyId"] = "658327ea-f89d-4fab-a63d-7e88639e58f6"
        self.assertIn("ApiDistribution: Managed-CachingDisabled", self.changed(change, True))


def find_statement(node, kind):
    """The first statement of `kind` (e.g. RegexMatchStatement) inside `node`."""
    if isinstance(node, dict):
        if kind in node:
            return node[kind]
        for v in node.values():
            found = find_statement(v, kind)
            if found is not None:
                return found
    if isinstance(node, list):
        for v in node:
            found = find_statement(v, kind)
            if found is not None:
                return found
    return None


def cloudfront(mode="gateway"):
    return ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"EdgeCloudFront": "true", "ConnectMode": mode})


class EdgeSized(TemplateChanges):
    """Issue 40 items 4 and 6: the rate defaults, the task API left out of the per-address rules
    and the managed groups (and nothing else with it), the address CloudFront saw, no sampled
    headers; each widened fails. The task API is on the stage in direct mode: these cases run
    on the direct-mode template (gateway mode's: TaskApiOffTheEdgeOfTheWebAcl)."""

    def template(self, cloudfront_on=False):
        return cloudfront("direct") if cloudfront_on else resolved("direct")

    def check(self, t, cloudfront_on=False):
        return edge_failures_of(t, cloudfront_on, gateway=False)

    def test_a_per_key_default_under_20_per_second_fails(self):
        def change(t):
            t["Parameters"]["WafRatePerApiKey"]["Default"] = 1000
        self.assertIn("WafRatePerApiKey: default at least 20 requests per second (6000 per 300 s; has 1000)", self.changed(change))

    def test_a_per_ip_default_under_the_keys_fails(self):
        def change(t):
            t["Parameters"]["WafRatePerIp"]["Default"] = 2000
        self.assertIn("WafRatePerIp: default at least WafRatePerApiKey's (2000 < 6000)", self.changed(change))

    def test_a_per_ip_rule_counting_the_tasks_fails(self):
        def change(t):
            del rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"]
        self.assertFails(
            change,
            "ApiWebAcl: rate-per-ip does not count the task API's POST /api/v1/internal/claims",
            "ApiWebAcl: rate-per-ip does not count the task API's POST /v1/internal/credentials",
        )

    def test_a_prefix_exclusion_fails(self):
        def change(t):
            find_statement(rule(t, "rate-per-ip"), "RegexMatchStatement")["RegexString"] = {"Fn::Sub": "^(/${StageName})?/v1/internal/"}
        self.assertFails(
            change,
            "ApiWebAcl: a direct POST /api/v1/internal/../sessions is counted once, by its peer's address ([])",
            "ApiWebAcl: a direct POST /api/v1/internal/%2e%2e/sessions is counted once",
        )

    def test_a_method_blind_exclusion_fails(self):
        def change(t):
            scope = rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"]
            scope["NotStatement"]["Statement"]["AndStatement"]["Statements"].pop(0)
        self.assertIn("ApiWebAcl: a direct GET /api/v1/internal/claims is counted once, by its peer's address ([])", self.changed(change))

    def test_a_managed_group_seeing_the_tasks_fails(self):
        def change(t):
            del rule(t, "aws-common")["Statement"]["ManagedRuleGroupStatement"]["ScopeDownStatement"]
        self.assertIn("ApiWebAcl: aws-common (AWSManagedRulesCommonRuleSet) does not see the task API's POST /api/v1/internal/claims",
                      self.changed(change))

    def test_a_managed_group_leaving_out_more_fails(self):
        def change(t):
            find_statement(rule(t, "aws-known-bad-inputs"), "RegexMatchStatement")["RegexString"] = "/v1/internal/"
        self.assertIn("ApiWebAcl: aws-known-bad-inputs (AWSManagedRulesKnownBadInputsRuleSet) sees POST /api/v1/sessions/v1/internal/claims",
                      self.changed(change))

    def test_an_unmodelled_statement_fails(self):
        def change(t):
            find_statement(rule(t, "aws-common"), "RegexMatchStatement")["TextTransformations"] = [{"Priority": 0, "Type": "URL_DECODE"}]
        self.assertIn("ApiWebAcl: a scope-down statement check_template cannot evaluate", self.changed(change))

    def test_the_viewer_rule_without_the_origin_header_fails(self):
        def change(t):
            rb = rule(t, "rate-per-viewer-ip")["Statement"]["RateBasedStatement"]
            rb["ScopeDownStatement"] = rb["ScopeDownStatement"]["AndStatement"]["Statements"][1]
        self.assertIn("ApiWebAcl: a direct POST /api/v1/sessions is counted once, by its peer's address (['rate-per-ip', 'rate-per-viewer-ip'])",
                      self.changed(change, True))

    def test_cloudfront_requests_counted_by_the_edge_fail(self):
        def change(t):
            rb = rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]
            rb["ScopeDownStatement"] = rb["ScopeDownStatement"]["AndStatement"]["Statements"][0]
        self.assertIn("ApiWebAcl: POST /api/v1/sessions through CloudFront is counted once, by the viewer's address "
                      "(['rate-per-ip', 'rate-per-viewer-ip'])", self.changed(change, True))

    def test_a_distribution_without_its_function_fails(self):
        def change(t):
            del ct.props(t, "ApiDistribution")["DistributionConfig"]["DefaultCacheBehavior"]["FunctionAssociations"]
        self.assertFails(
            change,
            "ApiDistribution: one viewer-request function (it writes the viewer's address)",
            "ApiWebAcl: rate-per-viewer-ip keyed on a forwarded address only behind CloudFront",
            cloudfront_on=True,
        )

    def test_a_function_keeping_the_clients_header_fails(self):
        def change(t):
            ct.props(t, "ApiViewerAddressFunction")["FunctionCode"] = "function handler(event) { return event.request; }"
        self.assertIn("ApiDistribution: its viewer-request function sets a header of its own to event.viewer.ip", self.changed(change, True))

    def test_no_origin_header_fails(self):
        def change(t):
            del ct.props(t, "ApiDistribution")["DistributionConfig"]["Origins"][0]["OriginCustomHeaders"]
        self.assertIn("ApiWebAcl: POST /api/v1/sessions through CloudFront is counted once, by the viewer's address (['rate-per-ip'])",
                      self.changed(change, True))

    def test_sampled_requests_fail(self):
        def change(t):
            ct.props(t, "ApiWebAcl")["VisibilityConfig"]["SampledRequestsEnabled"] = True
            rule(t, "rate-per-bb-api-key")["VisibilityConfig"]["SampledRequestsEnabled"] = True
        self.assertFails(
            change,
            "ApiWebAcl: ApiWebAcl keeps no sampled requests (they store x-wc-api-key, x-bb-api-key, x-wallcrawler-task-identity unredacted)",
            "ApiWebAcl: rate-per-bb-api-key keeps no sampled requests",
        )

    def test_logging_without_redaction_fails(self):
        def add(t):
            t["Resources"]["WafLogging"] = {"Type": "AWS::WAFv2::LoggingConfiguration", "Properties": {
                "ResourceArn": {"Fn::GetAtt": ["ApiWebAcl", "Arn"]}, "LogDestinationConfigs": ["arn:aws:logs:us-east-1:1:log-group:aws-waf-logs-x"],
                "RedactedFields": [{"SingleHeader": {"Name": "x-wc-api-key"}}]}}
        got = self.changed(add)
        self.assertIn("WafLogging: redacts x-bb-api-key", got)
        self.assertIn("WafLogging: redacts x-wallcrawler-task-identity", got)
        self.assertNotIn("WafLogging: redacts x-wc-api-key", got)

class TaskApiOffTheEdgeOfTheWebAcl(TemplateChanges):
    """Step 19 item 2: in gateway mode the task API is not on the stage, so the web ACL leaves
    nothing out: a request on its paths is counted per address and seen by the managed groups
    like any customer's; a rule still leaving it out fails."""

    def template(self, cloudfront_on=False):
        return cloudfront() if cloudfront_on else resolved()

    def check(self, t, cloudfront_on=False):
        return edge_failures_of(t, cloudfront_on)

    def test_the_template_passes(self):
        self.assertEqual(edge_failures_of(resolved()), [])
        self.assertEqual(edge_failures_of(cloudfront(), True), [])
        self.assertEqual(edge_failures_of(resolved("direct"), gateway=False), [])
        self.assertEqual(edge_failures_of(cloudfront("direct"), True, gateway=False), [])

    def test_a_per_ip_rule_leaving_out_the_internal_paths_fails(self):
        def change(t):
            direct = rule(resolved("direct"), "rate-per-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"]
            rule(t, "rate-per-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"] = direct
        self.assertFails(
            change,
            "ApiWebAcl: a direct POST /api/v1/internal/claims is counted once, by its peer's address ([])",
        )

    def test_a_managed_group_leaving_out_the_internal_paths_fails(self):
        def change(t):
            direct = rule(resolved("direct"), "aws-common")["Statement"]["ManagedRuleGroupStatement"]["ScopeDownStatement"]
            rule(t, "aws-common")["Statement"]["ManagedRuleGroupStatement"]["ScopeDownStatement"] = direct
        self.assertIn("ApiWebAcl: aws-common (AWSManagedRulesCommonRuleSet) sees POST /api/v1/internal/credentials", self.changed(change))

    def test_the_viewer_rule_leaving_out_the_internal_paths_fails(self):
        def change(t):
            direct = rule(cloudfront("direct"), "rate-per-viewer-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"]
            rule(t, "rate-per-viewer-ip")["Statement"]["RateBasedStatement"]["ScopeDownStatement"] = direct
        self.assertIn("ApiWebAcl: POST /api/v1/internal/claims through CloudFront is counted once, by the viewer's address ([])",
                      self.changed(change, True))


class EventsFiltered(TemplateChanges):
    """Issue 40 item 7: the stream mapping's parallel batches and its filter (every record that
    can make an event passes, usage items, REMOVEs and pending sessions' changes do not); each
    change fails."""

    def template(self):
        return resolved()

    def check(self, t):
        return edge_failures_of(t)

    def test_one_batch_per_shard_fails(self):
        def change(t):
            ct.props(t, "SessionEventsMapping")["ParallelizationFactor"] = 1
        self.assertIn("SessionEventsMapping: ParallelizationFactor 5-10", self.changed(change))

    def test_no_filter_fails(self):
        def change(t):
            del ct.props(t, "SessionEventsMapping")["FilterCriteria"]
        self.assertIn("SessionEventsMapping: FilterCriteria (usage items and lease-only changes do not invoke it)", self.changed(change))

    def test_a_filter_passing_usage_items_fails(self):
        def change(t):
            ct.props(t, "SessionEventsMapping")["FilterCriteria"]["Filters"][0]["Pattern"] = '{"eventName": ["INSERT"]}'
        self.assertIn("SessionEventsMapping: its filter drops INSERT of usage#proj_1 (it makes no event)", self.changed(change))

    def test_a_filter_passing_lease_changes_fails(self):
        def change(t):
            ct.props(t, "SessionEventsMapping")["FilterCriteria"]["Filters"][1]["Pattern"] = (
                '{"eventName": ["MODIFY"], "dynamodb": {"Keys": {"sessionId": {"S": [{"prefix": "sess_"}]}}}}')
        self.assertFails(
            change,
            "SessionEventsMapping: its filter drops MODIFY of sess_1 to STARTING (it makes no event)",
            "SessionEventsMapping: its filter drops MODIFY of sess_1 to CREATING (it makes no event)",
        )

    def test_a_filter_dropping_an_event_fails(self):
        def change(t):
            f = ct.props(t, "SessionEventsMapping")["FilterCriteria"]["Filters"][1]
            f["Pattern"] = f["Pattern"].replace('"TIMED_OUT"', '"TIMEDOUT"')
        self.assertIn("SessionEventsMapping: its filter passes MODIFY of sess_1 to TIMED_OUT (it can make an event)", self.changed(change))

    def test_a_filter_operator_not_understood_fails(self):
        def change(t):
            ct.props(t, "SessionEventsMapping")["FilterCriteria"]["Filters"][0]["Pattern"] = '{"eventName": [{"anything-but": ["REMOVE"]}]}'
        self.assertIn("SessionEventsMapping: filter operator {'anything-but': ['REMOVE']} not understood here", self.changed(change))


class SubnetsAndBuilds(unittest.TestCase):
    """Issue 40 item 8: every subnet parameter typed (so the VPC rule checks it), and every
    documented image build for the tasks' architecture; each widening fails."""

    def failures(self, change=lambda t: None, docs=None):
        t = raw()
        change(t)
        ct.failures.clear()
        ct.check_retention_policies(ct.resolve(t, {"ConnectMode": "gateway"}))
        ct.check_build_commands(t, ct.deploy_docs() if docs is None else docs)
        out = list(ct.failures)
        ct.failures.clear()
        return "\n".join(out)

    def test_the_template_and_docs_pass(self):
        self.assertEqual(self.failures(), "")
        self.assertEqual(self.failures(docs={"x.md": "```sh\ndocker build --platform linux/amd64 -t r:1 . && docker push r:1\n```\n"}), "")

    def test_a_plain_private_subnet_list_fails(self):
        def change(t):
            t["Parameters"]["PrivateSubnetIds"] = {"Type": "CommaDelimitedList", "Default": ""}
        self.assertIn("PrivateSubnetIds: List<AWS::EC2::Subnet::Id> (checked against VpcId by the SubnetsInVpc rule; CommaDelimitedList)",
                      self.failures(change))

    def test_no_vpc_rule_fails(self):
        def change(t):
            del t["Rules"]["SubnetsInVpc"]
        self.assertIn("Rules: every AWS::EC2::Subnet::Id parameter's subnets are in VpcId", self.failures(change))

    def test_a_build_without_platform_fails(self):
        got = self.failures(docs={"x.md": "Build:\n\n```sh\ndocker build -t r:1 . && docker push r:1\n```\n"})
        self.assertIn("x.md:4: docker build -t r:1 . builds for the tasks' linux/amd64 (--platform linux/amd64)", got)

    def test_a_build_for_another_platform_fails(self):
        got = self.failures(docs={"x.md": "or `podman build --platform linux/arm64 -t r:1 .`, or `docker buildx build -t r:1 .`\n"})
        self.assertIn("x.md:1: podman build --platform linux/arm64 -t r:1 . builds for the tasks' linux/amd64", got)
        self.assertIn("x.md:1: docker buildx build -t r:1 . builds for the tasks' linux/amd64", got)

    def test_no_build_documented_fails(self):
        self.assertIn("an image build command is documented", self.failures(docs={"x.md": "nothing"}))

    def test_task_definitions_of_two_architectures_fail(self):
        def change(t):
            ct.props(t, "TaskDefinition")["RuntimePlatform"]["CpuArchitecture"] = "ARM64"
        self.assertIn("every task definition's RuntimePlatform names one CpuArchitecture (['ARM64', 'X86_64'])", self.failures(change))


def proxies_failures_of(t, configured):
    """check_template's managed-proxies and claims-encryption assertions on `t`."""
    ct.failures.clear()
    ct.check_managed_proxies(t, configured)
    ct.check_claims_encrypted(t)
    out = list(ct.failures)
    ct.failures.clear()
    return out


def with_proxies(arn=ct.EXAMPLE_PROXIES_ARN):
    return ct.resolve(ct.load(ct.ROOT / "deploy/template.yaml"), {"ConnectMode": "gateway", ct.MANAGED_PROXIES_PARAM: arn})


MANAGED_PROXIES_GRANT = {"Sid": "ManagedProxies", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
                         "Resource": {"Ref": ct.MANAGED_PROXIES_PARAM}}


class ManagedProxiesAndClaims(TemplateChanges):
    """Issue 44: the managed proxy pools' secret is read by the API's role alone, on exactly its
    ARN, only when set; the claims (proxy credentials) are encrypted at rest and not kept long."""

    def setUp(self):
        self.t = with_proxies()
        self.empty = resolved()

    def template(self, configured=True):
        return self.t if configured else self.empty

    def check(self, t, configured=True):
        return proxies_failures_of(t, configured)

    def test_the_template_passes(self):
        self.assertEqual(proxies_failures_of(self.t, True), [])
        self.assertEqual(proxies_failures_of(self.empty, False), [])
        self.assertEqual(statement(self.t, "ApiFunctionRole", "ManagedProxies"), MANAGED_PROXIES_GRANT)
        self.assertEqual([p["PolicyName"] for p in ct.props(self.t, "ApiFunctionRole")["Policies"]], ["api", "managed-proxies"])
        self.assertEqual([p["PolicyName"] for p in ct.props(self.empty, "ApiFunctionRole")["Policies"]], ["api"])
        self.assertFalse([st for st in ct.statements(self.empty, "ApiFunctionRole") if st.get("Sid") == "ManagedProxies"])
        self.assertNotIn(ct.MANAGED_PROXIES_VAR, ct.props(self.empty, "ApiFunction")["Environment"]["Variables"])

    def test_a_grant_on_every_secret_fails(self):
        def widen(t):
            statement(t, "ApiFunctionRole", "ManagedProxies")["Resource"] = "*"
        self.assertFails(
            widen,
            "ApiFunctionRole: secretsmanager:GetSecretValue on exactly ManagedProxiesSecretArn",
            "ApiFunctionRole: ManagedProxies reaches Secrets Manager only on the operator's secrets by their parameters (['*'])",
        )

    def test_a_second_grant_on_every_secret_fails(self):
        def add(t):
            add_statement(t, "ApiFunctionRole", {"Sid": "AnySecret", "Effect": "Allow", "Action": "secretsmanager:*", "Resource": "*"})
        self.assertFails(
            add,
            "ApiFunctionRole: secretsmanager:GetSecretValue on exactly ManagedProxiesSecretArn, a statement of its own",
            "ApiFunctionRole: AnySecret reaches Secrets Manager only on the operator's secrets",
        )

    def test_a_pattern_of_secrets_fails(self):
        def widen(t):
            statement(t, "ApiFunctionRole", "ManagedProxies")["Resource"] = {
                "Fn::Sub": "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:*"}
        self.assertFails(
            widen,
            "ManagedProxiesSecretArn: read by ApiFunctionRole alone ([])",
            "ApiFunctionRole: ManagedProxies reaches Secrets Manager only on the operator's secrets",
        )

    def test_the_grant_on_another_role_fails(self):
        def add(t):
            add_statement(t, "SweeperFunctionRole", copy.deepcopy(MANAGED_PROXIES_GRANT))
        self.assertIn("ManagedProxiesSecretArn: read by ApiFunctionRole alone (['ApiFunctionRole', 'SweeperFunctionRole'])",
                      self.changed(add))

    def test_the_grant_moved_to_the_task_role_fails(self):
        def move(t):
            policies = ct.props(t, "ApiFunctionRole")["Policies"]
            policies[:] = [p for p in policies if p["PolicyName"] != "managed-proxies"]
            add_statement(t, "TaskRole", copy.deepcopy(MANAGED_PROXIES_GRANT))
        self.assertFails(
            move,
            "ManagedProxiesSecretArn: read by ApiFunctionRole alone (['TaskRole'])",
            "ManagedProxiesSecretArn: referred to by ApiFunction and ApiFunctionRole alone (['ApiFunction', 'TaskRole'])",
        )

    def test_a_task_role_reading_every_secret_fails(self):
        def add(t):
            add_statement(t, "TaskRole", {"Sid": "Secrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": "*"})
        self.assertFails(
            add,
            "ManagedProxiesSecretArn: read by ApiFunctionRole alone (['ApiFunctionRole', 'TaskRole'])",
            "TaskRole: Secrets reaches Secrets Manager only on the operator's secrets",
        )

    def test_the_grant_without_the_parameter_fails(self):
        def add(t):
            add_statement(t, "ApiFunctionRole", copy.deepcopy(MANAGED_PROXIES_GRANT))
        self.assertIn("ManagedProxiesSecretArn: read by no role (the parameter is empty) (['ApiFunctionRole'])",
                      self.changed(add, configured=False))

    def test_the_variable_without_the_parameter_fails(self):
        def add(t):
            ct.props(t, "ApiFunction")["Environment"]["Variables"][ct.MANAGED_PROXIES_VAR] = {"Ref": ct.MANAGED_PROXIES_PARAM}
        self.assertIn("MANAGED_PROXIES_SECRET_ARN: on no function (the parameter is empty)", self.changed(add, configured=False))

    def test_the_variable_on_the_sweeper_fails(self):
        def add(t):
            ct.props(t, "SweeperFunction")["Environment"]["Variables"][ct.MANAGED_PROXIES_VAR] = {"Ref": ct.MANAGED_PROXIES_PARAM}
        self.assertFails(
            add,
            "MANAGED_PROXIES_SECRET_ARN: on ApiFunction alone, = ManagedProxiesSecretArn",
            "'SweeperFunction'",
        )

    def test_no_variable_with_the_parameter_fails(self):
        def drop(t):
            del ct.props(t, "ApiFunction")["Environment"]["Variables"][ct.MANAGED_PROXIES_VAR]
        self.assertIn("MANAGED_PROXIES_SECRET_ARN: on ApiFunction alone, = ManagedProxiesSecretArn ({})", self.changed(drop))

    def test_a_parameter_taking_a_pattern_fails(self):
        def widen(t):
            t["Parameters"][ct.MANAGED_PROXIES_PARAM]["AllowedPattern"] = "^(arn:aws[a-z-]*:secretsmanager:.+)?$"
        self.assertIn("ManagedProxiesSecretArn: an optional String parameter (default empty), a full secret ARN or nothing",
                      self.changed(widen))

    def test_a_claims_queue_without_encryption_fails(self):
        for q in ("ClaimsQueue", "ClaimsDeadLetterQueue"):
            def drop(t):
                del ct.props(t, q)["SqsManagedSseEnabled"]
            self.assertIn(f"{q}: encrypted at rest (SqsManagedSseEnabled or KmsMasterKeyId)", self.changed(drop, configured=False))

    def test_managed_sse_turned_off_fails(self):
        def off(t):
            ct.props(t, "ClaimsDeadLetterQueue")["SqsManagedSseEnabled"] = False
        self.assertIn("ClaimsDeadLetterQueue: encrypted at rest", self.changed(off))

    def test_a_kms_key_passes(self):
        t = copy.deepcopy(self.t)
        p = ct.props(t, "ClaimsQueue")
        del p["SqsManagedSseEnabled"]
        p["KmsMasterKeyId"] = "alias/aws/sqs"
        self.assertEqual(proxies_failures_of(t, True), [])

    def test_dead_claims_kept_14_days_fail(self):
        def widen(t):
            ct.props(t, "ClaimsDeadLetterQueue")["MessageRetentionPeriod"] = 1209600
        self.assertIn("ClaimsDeadLetterQueue: MessageRetentionPeriod (1209600)", self.changed(widen))


def raw():
    return ct.load(ct.ROOT / "deploy/template.yaml")


def names_failures_of(t, docs=None):
    """check_template's name-length and deploy-command assertions on the raw template `t` and
    the docs (the repository's unless given)."""
    ct.failures.clear()
    ct.check_name_lengths(t)
    ct.check_deploy_commands(t, ct.deploy_docs() if docs is None else docs)
    out = list(ct.failures)
    ct.failures.clear()
    return out


DEPLOY_DOC = """Deploy:

```bash
aws cloudformation deploy --stack-name wallcrawler --template-file deploy/template.yaml \\
  --capabilities CAPABILITY_NAMED_IAM --parameter-overrides \\
    VpcId=vpc-1
```

or, inline, `aws cloudformation create-stack --stack-name w --template-body file://deploy/template.yaml
--capabilities CAPABILITY_NAMED_IAM`; `aws cloudformation deploy` keeps unchanged parameters.
"""


class NamesAndCapabilities(TemplateChanges):
    """Issue 40: every name built from NamePrefix fits at NamePrefix's MaxLength, and every
    documented deploy command passes CAPABILITY_NAMED_IAM; each widening fails."""

    def setUp(self):
        self.t = raw()

    def template(self, docs=None):
        return self.t

    def check(self, t, docs=None):
        return names_failures_of(t, docs)

    def test_the_template_and_docs_pass(self):
        self.assertEqual(names_failures_of(self.t), [])
        self.assertEqual(names_failures_of(self.t, {"x.md": DEPLOY_DOC}), [])
        self.assertEqual(len(ct.doc_commands(DEPLOY_DOC)), 2)

    def test_a_longer_prefix_fails(self):
        def widen(t):
            t["Parameters"]["NamePrefix"]["MaxLength"] = t["Parameters"]["NamePrefix"]["MaxLength"] + 1
        self.assertFails(
            widen,
            'ConnectLoadBalancer: Name {"Fn::Sub": "${NamePrefix}-connect"} is 33 characters with NamePrefix at its MaxLength 25',
            "GatewayTargetGroup: Name",
        )

    def test_no_max_length_fails(self):
        def drop(t):
            del t["Parameters"]["NamePrefix"]["MaxLength"]
        self.assertIn("NamePrefix: a MaxLength", self.changed(drop))

    def test_a_longer_suffix_fails(self):
        def widen(t):
            ct.props(t, "SessionRole")["RoleName"] = {"Fn::Sub": "${NamePrefix}-${AWS::Region}-session-of-the-browser-tasks"}
        self.assertIn("SessionRole: RoleName", self.changed(widen))

    def test_a_name_of_an_unknown_type_fails(self):
        def add(t):
            t["Resources"]["Machine"] = {"Type": "AWS::StepFunctions::StateMachine",
                                         "Properties": {"StateMachineName": {"Fn::Sub": "${NamePrefix}-machine"}}}
        self.assertIn("Machine: AWS::StepFunctions::StateMachine StateMachineName is built from NamePrefix and NAME_LIMITS has no limit for it",
                      self.changed(add))

    def test_an_unbounded_name_fails(self):
        def widen(t):
            ct.props(t, "ApiFunction")["FunctionName"] = {"Fn::Sub": "${NamePrefix}-${LambdaCodeBucket}"}
        self.assertIn("ApiFunction: FunctionName cannot be bounded", self.changed(widen))

    def test_a_command_with_capability_iam_only_fails(self):
        doc = DEPLOY_DOC.replace("CAPABILITY_NAMED_IAM --parameter", "CAPABILITY_IAM --parameter")
        self.assertFails(
            lambda t: None,
            "docs/x.md:4: aws cloudformation deploy passes CAPABILITY_NAMED_IAM (the template names SessionRole) (has ['CAPABILITY_IAM'])",
            docs={"docs/x.md": doc},
        )

    def test_an_inline_command_without_capabilities_fails(self):
        doc = DEPLOY_DOC.replace("\n--capabilities CAPABILITY_NAMED_IAM`", "`")
        self.assertIn("docs/x.md:9: aws cloudformation create-stack passes CAPABILITY_NAMED_IAM", self.changed(lambda t: None, {"docs/x.md": doc}))

    def test_no_documented_command_fails(self):
        self.assertIn("a deploy command is documented", self.changed(lambda t: None, {"docs/x.md": "nothing"}))


class BodyLimitRegex(unittest.TestCase):
    def test_matches_exactly_the_numbers_above(self):
        import re
        for n in (4259840, 1000, 999, 8192):
            r = re.compile(ct.above_regex(n))
            for v in list(range(max(0, n - 300), n + 300)) + [n * 10, n * 10 + 7, 10 ** 9]:
                self.assertEqual(bool(r.match(str(v))), v > n, (n, v))
            self.assertFalse(r.match(f"00{n}"))
            self.assertTrue(r.match(f"00{n + 1}"))


if __name__ == "__main__":
    unittest.main()
