#!/usr/bin/env python3
"""Direct assertions on deploy/template.yaml for what cfn-lint does not check and moto ignores.

moto's CloudFormation silently drops DynamoDB TTL and PITR, task-level Fargate settings and the
bucket's public access block and lifecycle, and cfn-lint misses some ranges (StopTimeout > 120),
so the stack test alone would not notice them missing. Also checked here against the code:
every environment variable the template sets is one the code reads, the variables the code
requires are set, every AWS call the code makes is allowed to the role that makes it, the
session role (a task's authority over the session it serves, through the task API) and the
gateway role reach only the session item's attributes the code names (the contract's
attr::TASK_READS, TASK_WRITES, GATEWAY_READS: never the token or connectUrl) and only the
bucket's keys the controller uses, the task role itself reaches no table, bucket, queue or ECS
task, only the API's role may assume the session role or receive claims, and the task API's
route is the only one without the API-key authorizer but the dashboard's static page, GET
/dashboard (deploy/test_check_template.py: their
failing cases), and every checkov skip carries a reason. Every name built from NamePrefix fits
its resource type's limit with NamePrefix at its MaxLength (NAME_LIMITS), and every deploy
command the docs give passes the IAM capability the template needs (CAPABILITY_NAMED_IAM: it
names a role). The managed proxy pools' secret (ManagedProxiesSecretArn, optional): set, the API
function alone gets MANAGED_PROXIES_SECRET_ARN and its role alone GetSecretValue on exactly that
ARN; empty, neither; every Secrets Manager grant names one of the operator's secrets by its
parameter. A claim carries its session's proxy credentials: both claims queues are encrypted at
rest, and the dead-letter queue keeps a claim at most 4 days.

The edge and the events (issue 40): one API key, and one address, may send at least 20 requests
per second by default; the rules keyed on an address and the managed rule groups leave out the
task API's requests and nothing else in direct mode, nothing at all in gateway mode, whose task
API is off the stage (their scope-down statements evaluated on the contract's
task API routes and on customer paths made to look like them); no rule trusts a client's
X-Forwarded-For (behind CloudFront, the address the distribution's function writes, for requests
that carry its origin header); no sampled requests (they keep the API keys and task identities
unredacted), and any WAF logging redacts those headers. The sessions stream's mapping runs 5-10
batches per shard and filters out what makes no event (records checked against the contract's
statuses). Every subnet parameter is of the subnet type (the VPC rule checks it), and every
documented image build passes --platform for the task definitions' architecture.

The template has two connect modes (the ConnectMode parameter). Every assertion runs on the
template as CloudFormation would resolve it in each mode, with ManagedProxiesSecretArn empty
and set (conditions evaluated, Fn::If taken, AWS::NoValue dropped, resources of false
conditions left out); a failure names its mode ("gateway, managed proxies"). In
gateway mode it also asserts the connect leg: no ECS service assigns a public IP, the browser
tasks' security group admits tcp 9223 only from the gateway's security group (no address
range), the target group has PROXY protocol v2 on, the gateway's role allows only what the
gateway calls; and the task API is off the customer edge (Step 19 item 2): no API Gateway
resource under /v1/internal and no task API variable or grant on the API function; the task API
service runs the control plane's binary's task-api command in the private subnets without a
public IP, behind an internal load balancer whose HTTPS listener (the connect host's
certificate) forwards POST /v1/internal/* alone; the load balancer admits the browser tasks'
group alone, the service the load balancer's; the tasks' TASK_API_URL is https:// on the connect
host and TASK_API_ADDRESS the internal load balancer; TaskApiRole allows exactly what the task
API's code calls; long polls fit the idle timeout, the deregistration delay and the stop
timeout. Direct mode keeps the task API on the API function behind API Gateway. A DependsOn
names only resources its mode creates (a conditional one goes through a wait condition
handle's Metadata).

    .venv/bin/python deploy/check_template.py [deploy/template.yaml]

Prints one line per failed assertion to stderr and exits 1 if any failed.
"""

import fnmatch
import hashlib
import json
import os
import re
import sys
from pathlib import Path

from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parent.parent
failures = []
MODE = [""]


def check(cond, what):
    if not cond:
        failures.append(f"[{MODE[0]}] {what}" if MODE[0] else what)
    return cond


def load(path):
    template, matches = decode(str(path))
    if matches:
        sys.exit(f"cannot parse {path}: {matches}")
    return template


NO_VALUE = object()


def resolve(t, overrides):
    """The template as CloudFormation resolves it with the parameters' defaults and `overrides`:
    conditions evaluated, Fn::If taken, AWS::NoValue dropped, resources and outputs whose
    condition is false left out. Other intrinsic functions stay as they are."""
    params = {k: v.get("Default") for k, v in t.get("Parameters", {}).items()}
    params.update(overrides)
    conds = {}

    def value(x):
        if isinstance(x, dict) and "Ref" in x and x["Ref"] in params:
            return params[x["Ref"]]
        return x

    def ev(e):
        (k, v), = e.items()
        if k == "Fn::Equals":
            return value(v[0]) == value(v[1])
        if k == "Fn::Not":
            return not ev(v[0])
        if k == "Fn::And":
            return all(ev(x) for x in v)
        if k == "Fn::Or":
            return any(ev(x) for x in v)
        if k == "Condition":
            return cond(v)
        raise ValueError(f"cannot evaluate condition {e}")

    def cond(name):
        if name not in conds:
            conds[name] = ev(t["Conditions"][name])
        return conds[name]

    def walk(node):
        if isinstance(node, dict):
            if list(node) == ["Fn::If"]:
                c, a, b = node["Fn::If"]
                return walk(a if cond(c) else b)
            if node == {"Ref": "AWS::NoValue"}:
                return NO_VALUE
            out = {k: walk(v) for k, v in node.items()}
            return {k: v for k, v in out.items() if v is not NO_VALUE}
        if isinstance(node, list):
            return [x for x in (walk(v) for v in node) if x is not NO_VALUE]
        return node

    out = {k: v for k, v in t.items() if k not in ("Resources", "Outputs")}
    for section in ("Resources", "Outputs"):
        out[section] = {
            k: walk(v) for k, v in t.get(section, {}).items() if "Condition" not in v or cond(v["Condition"])
        }
    return out


def resources(t, rtype):
    return {k: v for k, v in t["Resources"].items() if v["Type"] == rtype}


def props(t, name):
    """The resource's Properties; none for a missing resource (whose checks then fail)."""
    return t["Resources"].get(name, {}).get("Properties", {})


def statements(t, role):
    out = []
    for p in props(t, role).get("Policies", []):
        out.extend(p["PolicyDocument"]["Statement"])
    return out


def as_list(v):
    return v if isinstance(v, list) else [v]


def ref_names(v):
    """The logical ids a Resource expression refers to (Ref, GetAtt, Sub)."""
    out = set()
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "Ref":
                out.add(x)
            elif k == "Fn::GetAtt":
                out.add(x[0] if isinstance(x, list) else x.split(".")[0])
            elif k == "Fn::Sub":
                s = x[0] if isinstance(x, list) else x
                out.update(m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", s))
            else:
                out |= ref_names(x)
    elif isinstance(v, list):
        for x in v:
            out |= ref_names(x)
    return out


def allowed(t, role, action, resource):
    """Whether `role` has a statement allowing `action` on a resource naming `resource`."""
    for st in statements(t, role):
        if st.get("Effect") != "Allow" or action not in as_list(st["Action"]):
            continue
        res = as_list(st["Resource"])
        if resource == "*" and "*" in res:
            return True
        if any(resource in ref_names(r) for r in res):
            return True
    return False


def actions(t, role):
    return {a for st in statements(t, role) for a in as_list(st["Action"])}


# The SDK calls the code makes (`.op()`), as IAM actions.
OPS = {
    "get_item": "dynamodb:GetItem",
    "put_item": "dynamodb:PutItem",
    "update_item": "dynamodb:UpdateItem",
    "delete_item": "dynamodb:DeleteItem",
    "query": "dynamodb:Query",
    "scan": "dynamodb:Scan",
    "get_object": "s3:GetObject",
    "put_object": "s3:PutObject",
    "create_multipart_upload": "s3:PutObject",
    "upload_part": "s3:PutObject",
    "complete_multipart_upload": "s3:PutObject",
    "abort_multipart_upload": "s3:AbortMultipartUpload",
    "delete_object": "s3:DeleteObject",
    "list_objects_v2": "s3:ListBucket",
    "run_task": "ecs:RunTask",
    "stop_task": "ecs:StopTask",
    "list_tasks": "ecs:ListTasks",
    "send_message": "sqs:SendMessage",
    "receive_message": "sqs:ReceiveMessage",
    "delete_message": "sqs:DeleteMessage",
    "change_message_visibility": "sqs:ChangeMessageVisibility",
    "update_task_protection": "ecs:UpdateTaskProtection",
    "assume_role": "sts:AssumeRole",
    "get_secret_value": "secretsmanager:GetSecretValue",
    "describe_network_interfaces": "ec2:DescribeNetworkInterfaces",
}


def sources(*patterns):
    """The text of every file matching the patterns (paths or globs under the repository)."""
    return "\n".join(f.read_text() for pat in patterns for f in sorted(ROOT.glob(pat)))


# The controller reads the names the control plane hands it as constants of the contract crate.
CONTROLLER_CONFIG = ("src/config/*.rs", "crates/contract/src/task_env.rs")
# The control plane's AWS adapter, one file per service.
CONTROL_PLANE_AWS = ("crates/control-plane/src/aws/*.rs",)
# The four functions, all built from crates/control-plane (scripts/lambda.sh's FUNCTIONS).
FUNCTIONS = ("ApiFunction", "AuthorizerFunction", "TaskEventsFunction", "SweeperFunction")
# The task API's own AWS calls (its broker; the sessions store and the signer it goes through
# are the API's too): in gateway mode TaskApiRole's, not the API function's.
TASK_API_CODE = ("crates/control-plane/src/aws/broker.rs",)
# The stores the task API's broker goes through besides its own calls: the sessions store (its
# read, the claim's take with the task's marker, ending a session) and the signing key fetcher.
TASK_API_STORES = ("crates/control-plane/src/aws/sessions.rs", "crates/control-plane/src/aws/table.rs", "crates/aws/src/secrets.rs")
# The control plane's binary the task API service runs, and its command.
CONTROL_PLANE_BIN = "crates/control-plane/src/bin/wallcrawler-control-plane.rs"
TASK_API_ENTRYPOINT = ["/usr/bin/tini", "--", "/usr/local/bin/wallcrawler-control-plane"]
TASK_API_COMMAND = ["task-api"]
# The variables that turn the task API on (crates/control-plane/src/aws/config.rs TASK_API_VARS).
TASK_API_VARS = {
    "TASK_ROLE_ARN": {"Fn::GetAtt": ["TaskRole", "Arn"]},
    "TASKS_TABLE_NAME": {"Ref": "TasksTable"},
    "SESSION_ROLE_ARN": {"Fn::GetAtt": ["SessionRole", "Arn"]},
}
# What the API function's role holds for the task API in direct mode alone (gateway mode:
# TaskApiRole's, with the rest of TASK_API_ROLE_GRANTS): the claims the task API receives, hands
# back and drops for the tasks, and the tasks table's markers.
TASK_API_GRANTS = [
    ("sqs:ReceiveMessage", "ClaimsQueue"),
    ("sqs:DeleteMessage", "ClaimsQueue"),
    ("sqs:ChangeMessageVisibility", "ClaimsQueue"),
    ("dynamodb:PutItem", "TasksTable"),
    ("dynamodb:GetItem", "TasksTable"),
]
# Exactly what TaskApiRole allows (action, resource): TASK_API_GRANTS, the session read, taken
# (the claim's transaction: each item authorised as its own write) and ended, the SessionRole
# (by its fixed name: check_task_authority), the signing key (the live view a grant carries).
TASK_API_ROLE_GRANTS = set(TASK_API_GRANTS) | {
    ("dynamodb:GetItem", "SessionsTable"),
    ("dynamodb:UpdateItem", "SessionsTable"),
    ("sts:AssumeRole", "SessionRole"),
    ("secretsmanager:GetSecretValue", "SigningSecret"),
}
# The sweeper's binary and the library module it runs; it calls the stores of aws/.
SWEEPER_CODE = ("crates/control-plane/src/bin/wallcrawler-sweeper-lambda.rs", "crates/control-plane/src/sweep.rs")


def code_actions(*paths, without=()):
    # Each file without its unit tests (a `#[cfg(test)] mod tests` at its end), whose calls
    # (e.g. an administrator's PutItem setting a test up) are not the code's; the files of
    # `without` (paths) left out.
    src = "\n".join(
        re.split(r"\n#\[cfg\(test\)\]\nmod tests \{", f.read_text())[0]
        for pat in paths
        for f in sorted(ROOT.glob(pat))
        if str(f.relative_to(ROOT)) not in without
    )
    # `.op()` at the start of a builder chain (the SDK's fluent calls), not e.g. `uri.query()`;
    # or `client.op()` of a chain short enough for one line.
    found = {a or b for a, b in re.findall(r"\n\s*\.([a-z_]+)\(\)\s*\n|\bclient\.([a-z_]+)\(\)", src)}
    # A TransactWriteItems is authorised per item, as the item's own write.
    items = {"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem", "Delete": "dynamodb:DeleteItem"}
    transact = {items[k] for k in re.findall(r"\b(Put|Update|Delete)::builder\(\)", src)}
    # An object written with tags (`.set_tagging(…)` in a PutObject or multipart chain) is
    # authorised as PutObjectTagging too.
    tagging = {"s3:PutObjectTagging"} if re.search(r"\.set_tagging\(", src) else set()
    return {OPS[o] for o in found if o in OPS} | transact | tagging


def env_names_read(*paths):
    return set(re.findall(r'"([A-Z][A-Z0-9_]{3,})"', sources(*paths)))


# Variables the template sets ahead of the code that reads them (Step 13: the task API's
# configuration in the control plane, written on another branch at the same time). Until the
# code reads one, it is a note, not a failure; once merged, nothing here is unread and the set
# can be emptied.
AHEAD = set()
notes = []


def note(what):
    if what not in notes:
        notes.append(what)


def check_read(name, read, what):
    """`name`, set by the template, is read by the code (`read`)."""
    if name in AHEAD and name not in read:
        note(f"{what}: not yet (set ahead of the code)")
        return
    check(name in read or name.startswith("AWS_"), what)


def check_mode(t, mode, proxies=False):
    """Every assertion on `t`, the template resolved for ConnectMode `mode` and, with `proxies`,
    ManagedProxiesSecretArn set."""
    MODE[0] = mode + (", managed proxies" if proxies else "")
    gateway = mode == "gateway"
    r = t["Resources"]

    # --- Tables: names, keys, indexes, TTL, stream, PITR, on-demand ----------------------
    tables = {
        "SessionsTable": ("-sessions", "sessionId"),
        "ProjectsTable": ("-projects", "projectId"),
        "ApiKeysTable": ("-api-keys", "apiKeyHash"),
        "ContextsTable": ("-contexts", "contextId"),
        "TasksTable": ("-tasks", "taskId"),
    }
    for name, (suffix, key) in tables.items():
        p = props(t, name)
        check(str(p.get("TableName", {}).get("Fn::Sub", "")).endswith(suffix), f"{name}: TableName ends with {suffix}")
        check(p.get("KeySchema") == [{"AttributeName": key, "KeyType": "HASH"}], f"{name}: key {key} (HASH only)")
        check(p.get("BillingMode") == "PAY_PER_REQUEST", f"{name}: BillingMode PAY_PER_REQUEST")
        check(
            p.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") is True,
            f"{name}: point-in-time recovery enabled",
        )
    slots = props(t, "SlotsTable")
    check(str(slots.get("TableName", {}).get("Fn::Sub", "")).endswith("-slots"), "SlotsTable: TableName ends with -slots")
    check(
        slots.get("KeySchema") == [
            {"AttributeName": "projectId", "KeyType": "HASH"},
            {"AttributeName": "sessionId", "KeyType": "RANGE"},
        ]
        and slots.get("BillingMode") == "PAY_PER_REQUEST"
        and slots.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") is True,
        "SlotsTable: projectId (HASH) + sessionId (RANGE): a counter and one item per held slot; on-demand, PITR",
    )
    for name in ("SessionsTable", "TasksTable"):
        check(
            props(t, name).get("TimeToLiveSpecification") == {"AttributeName": "expiresAt", "Enabled": True},
            f"{name}: TTL on expiresAt",
        )
    s = props(t, "SessionsTable")
    # The stream (Step 15) and who reads it: check_session_events.
    attrs = {a["AttributeName"]: a["AttributeType"] for a in s["AttributeDefinitions"]}
    check(attrs.get("expiresAt") == "N", "SessionsTable: expiresAt is a number")
    gsis = {g["IndexName"]: g for g in s.get("GlobalSecondaryIndexes", [])}
    g = gsis.get("projectId-createdAt-index", {})
    check(
        g.get("KeySchema") == [
            {"AttributeName": "projectId", "KeyType": "HASH"},
            {"AttributeName": "createdAt", "KeyType": "RANGE"},
        ]
        and g.get("Projection", {}).get("ProjectionType") == "INCLUDE"
        and set(g["Projection"].get("NonKeyAttributes", [])) == listed_attributes(),
        "SessionsTable: projectId-createdAt-index (projectId, createdAt; INCLUDE exactly the contract's attr::LISTED)",
    )
    check(
        not {"signingKey", "connectUrl"} & set(g.get("Projection", {}).get("NonKeyAttributes", [])),
        "SessionsTable: projectId-createdAt-index holds no token (signingKey, connectUrl)",
    )
    g = gsis.get("status-expiresAt-index", {})
    check(
        g.get("KeySchema") == [
            {"AttributeName": "status", "KeyType": "HASH"},
            {"AttributeName": "expiresAt", "KeyType": "RANGE"},
        ]
        and g.get("Projection") == {"ProjectionType": "KEYS_ONLY"},
        "SessionsTable: status-expiresAt-index (status, expiresAt; KEYS_ONLY)",
    )
    g = gsis.get("ecsTaskArn-index", {})
    check(
        g.get("KeySchema") == [{"AttributeName": "ecsTaskArn", "KeyType": "HASH"}]
        and g.get("Projection") == {"ProjectionType": "KEYS_ONLY"},
        "SessionsTable: ecsTaskArn-index (ecsTaskArn; KEYS_ONLY)",
    )
    g = gsis.get("contextId-index", {})
    check(
        g.get("KeySchema") == [{"AttributeName": "contextId", "KeyType": "HASH"}]
        and g.get("Projection") == {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["endedAt"]}
        and attrs.get("contextId") == "S",
        "SessionsTable: contextId-index (contextId; INCLUDE endedAt only: no token)",
    )
    src = sources(*CONTROL_PLANE_AWS)
    for const in ("PROJECT_INDEX", "TASK_INDEX", "CONTEXT_INDEX"):
        m = re.search(const + r': &str = "([^"]+)"', src)
        check(m and m.group(1) in gsis, f"SessionsTable: has the index the code queries ({const})")
    k = {g["IndexName"]: g for g in props(t, "ApiKeysTable").get("GlobalSecondaryIndexes", [])}
    check(
        k.get("projectId-index", {}).get("KeySchema") == [{"AttributeName": "projectId", "KeyType": "HASH"}],
        "ApiKeysTable: projectId-index (projectId)",
    )

    # --- Bucket --------------------------------------------------------------------------
    b = props(t, "ContextsBucket")
    check(
        b.get("PublicAccessBlockConfiguration")
        == {k: True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")},
        "ContextsBucket: public access fully blocked",
    )
    check(
        b.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration"),
        "ContextsBucket: default encryption",
    )
    rules = b.get("LifecycleConfiguration", {}).get("Rules", [])
    check(
        any(
            x.get("Status") == "Enabled" and x.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation")
            for x in rules
        ),
        "ContextsBucket: lifecycle aborts incomplete multipart uploads",
    )
    policies = [p for p in resources(t, "AWS::S3::BucketPolicy").values() if "ContextsBucket" in ref_names(p["Properties"]["Bucket"])]
    check(
        any(
            st.get("Effect") == "Deny"
            and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") in ("false", False)
            for p in policies
            for st in p["Properties"]["PolicyDocument"]["Statement"]
        ),
        "ContextsBucket: a policy denies requests without TLS",
    )

    # --- Queue and dead-letter queue ------------------------------------------------------
    rp = props(t, "ClaimsQueue").get("RedrivePolicy", {})
    check("ClaimsDeadLetterQueue" in ref_names(rp.get("deadLetterTargetArn")), "ClaimsQueue: redrives to ClaimsDeadLetterQueue")
    # Handed-back receives (a stopped controller, a duplicated claim) count too: room for them,
    # still bounded so a poison claim reaches the dead-letter queue.
    check(5 <= int(rp.get("maxReceiveCount", 0)) <= 20, "ClaimsQueue: maxReceiveCount between 5 and 20")
    check_claims_encrypted(t)

    # --- Secrets --------------------------------------------------------------------------
    check_token_secrets(t, gateway)
    check_managed_proxies(t, proxies)

    # --- Task definition ------------------------------------------------------------------
    td = props(t, "TaskDefinition")
    check(td.get("Cpu") and td.get("Memory"), "TaskDefinition: task-level Cpu and Memory")
    check(td.get("NetworkMode") == "awsvpc", "TaskDefinition: NetworkMode awsvpc")
    check(td.get("RequiresCompatibilities") == ["FARGATE"], "TaskDefinition: RequiresCompatibilities [FARGATE]")
    check(td.get("ExecutionRoleArn") and td.get("TaskRoleArn"), "TaskDefinition: execution role and task role")
    (c,) = td["ContainerDefinitions"]
    check(c.get("Name") == "controller", "TaskDefinition: the container is `controller` (ECS_CONTAINER_NAME)")
    env = {e["Name"]: e["Value"] for e in c.get("Environment", [])}
    budget = int(env.get("SHUTDOWN_BUDGET_SECONDS", 25))
    stop = c.get("StopTimeout")
    check(isinstance(stop, int) and budget < stop <= 120, f"TaskDefinition: SHUTDOWN_BUDGET_SECONDS ({budget}) < StopTimeout ({stop}) <= 120")
    check(
        [(p.get("ContainerPort"), p.get("Protocol", "tcp")) for p in c.get("PortMappings", [])] == [(9223, "tcp")],
        "TaskDefinition: port 9223/tcp only",
    )
    dockerfile = (ROOT / "Dockerfile").read_text()
    hc = c.get("HealthCheck", {}).get("Command")
    check(
        hc and f'["{hc[0]}", "{hc[1]}"]' in dockerfile,
        "TaskDefinition: health check as the Dockerfile's comment says",
    )
    check(c.get("LogConfiguration", {}).get("LogDriver") == "awslogs", "TaskDefinition: awslogs")
    check(c.get("MemoryReservation") or c.get("Memory"), "TaskDefinition: container memory reservation")
    read = env_names_read(*CONTROLLER_CONFIG)
    for name in env:
        check_read(name, read, f"TaskDefinition: {name} is read by src/config/")
    for name in ("SESSIONS_TABLE_NAME", "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "CONTEXTS_BUCKET_NAME", "POOL_QUEUE_URL"):
        check(name in env, f"TaskDefinition: sets {name} (pool mode)")
    check(
        "PublicKeySecret" in ref_names(env.get("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN"))
        and not any("SigningSecret" in ref_names(v) for v in env.values()),
        "TaskDefinition: the public key secret, never the signing secret",
    )

    # --- Pool service ---------------------------------------------------------------------
    svc = props(t, "PoolService")
    check(svc.get("DesiredCount") == {"Ref": "PoolSize"}, "PoolService: DesiredCount = PoolSize")
    check(svc.get("LaunchType") == "FARGATE", "PoolService: FARGATE")

    # --- Functions: runtime, environment ---------------------------------------------------
    cp_read = env_names_read(*CONTROL_PLANE_AWS)
    required = set(re.findall(r'required\("([A-Z_]+)"\)', src)) | {"ECS_SUBNETS"}
    for fn in FUNCTIONS:
        p = props(t, fn)
        check(p.get("Runtime") == "provided.al2023" and p.get("Handler") == "bootstrap", f"{fn}: provided.al2023, bootstrap")
        for name in p.get("Environment", {}).get("Variables", {}):
            check_read(name, cp_read, f"{fn}: {name} is read by crates/control-plane/src/aws/")
    api_env = props(t, "ApiFunction")["Environment"]["Variables"]
    for name in sorted(required | {"POOL_QUEUE_URL"}):
        check(name in api_env, f"ApiFunction: sets {name}")
    # The sweeper reads the API function's configuration (aws::Config): the same values.
    if "GatewayTaskDefinition" in t["Resources"]:
        gw = props(t, "GatewayTaskDefinition")["ContainerDefinitions"][0]["Environment"]
        gw_env = {e["Name"]: e["Value"] for e in gw}
        check(
            gw_env.get("GATEWAY_HOLD_SECONDS") == {"Ref": "ClaimWaitSeconds"}
            and api_env.get("CLAIM_WAIT_SECONDS") == {"Ref": "ClaimWaitSeconds"},
            "GatewayTaskDefinition: holds a client as long as the API's claim wait (GATEWAY_HOLD_SECONDS = ClaimWaitSeconds)",
        )
    sweeper_env = props(t, "SweeperFunction")["Environment"]["Variables"]
    for name in sorted(required | {"POOL_QUEUE_URL"}):
        check(sweeper_env.get(name) == api_env.get(name), f"SweeperFunction: sets {name} as the API function does")
    # The create's wait is derived from API Gateway's integration limit (aws/config.rs), not
    # configured beside it: the function outlives that limit and is given no wait of its own.
    cp_config = (ROOT / "crates/control-plane/src/aws/config.rs").read_text()
    limit = int(re.search(r"INTEGRATION_LIMIT: Duration = Duration::from_secs\((\d+)\)", cp_config).group(1))
    check(limit == 29, "aws/config.rs: INTEGRATION_LIMIT is API Gateway's 29 s")
    check(int(props(t, "ApiFunction")["Timeout"]) > limit, "ApiFunction: Timeout above API Gateway's integration limit")
    check("CREATE_WAIT_SECONDS" not in api_env, "ApiFunction: no CREATE_WAIT_SECONDS (the wait is derived from the 29 s limit)")
    # A warm task's claim long poll (at most the contract's MAX_WAIT_SECONDS) is answered within
    # that limit, with time left to take the session and assume the SessionRole.
    task_api = (ROOT / "crates/contract/src/task_api.rs").read_text()
    wait = int(re.search(r"MAX_WAIT_SECONDS: u64 = (\d+);", task_api).group(1))
    check(wait <= 20 and wait + 5 <= limit, f"task API: a claim waits at most {wait} s, answered within API Gateway's {limit} s")

    # --- IAM: every call the code makes is allowed, on the right resource -------------------
    def needs(role, action, resource):
        check(allowed(t, role, action, resource), f"{role}: allows {action} on {resource}")

    # Both sides fetch their key secret through the shared crate's one fetcher, and read
    # archives through its one GetObject.
    shared = code_actions("crates/aws/src/secrets.rs")
    check(shared, "found the shared Secrets Manager fetcher's SDK call in crates/aws/src/secrets.rs")
    shared_s3 = code_actions("crates/aws/src/lib.rs")
    check(shared_s3 == {"s3:GetObject"}, f"found the shared GetObject (only) in crates/aws/src/lib.rs ({sorted(shared_s3)})")
    shared |= shared_s3
    controller = code_actions("src/aws.rs", "src/scale_in.rs") | shared
    check(controller, "found the controller's SDK calls in src/aws.rs")
    # With TASK_API_URL (always, in this template) the controller protects itself through the
    # ECS API with its session's credentials (src/aws.rs); the ECS agent's endpoint
    # (src/scale_in.rs, the task role's) is for a deployment without the task API.
    check("ecs:UpdateTaskProtection" in controller, "the controller calls UpdateTaskProtection through the ECS API (src/aws.rs)")
    if gateway:
        # Behind the gateway the task announces its private address and asks EC2 nothing.
        controller.discard("ec2:DescribeNetworkInterfaces")
    if "s3:GetObject" in controller:
        # Not called, but what makes a missing key 404 rather than 403 (check_list_bucket).
        controller.add("s3:ListBucket")
    # The task role keeps what a warm task needs by itself; the rest is the session's, through
    # the task API's credentials, except receiving claims, which the API does for the task.
    own = {a for a in controller if a.split(":")[0] in TASK_ROLE_SERVICES}
    session = controller - own - {"sqs:ReceiveMessage"}
    for role, wanted in (("TaskRole", own), ("SessionRole", session)):
        for a in sorted(wanted):
            res = {
                "dynamodb": "SessionsTable",
                "s3": "ContextsBucket",
                "sqs": "ClaimsQueue",
                "secretsmanager": "PublicKeySecret",
                "ec2": "*",
                "ecs": "Cluster",
            }[a.split(":")[0]]
            needs(role, a, res)
        check(actions(t, role) <= wanted, f"{role}: nothing beyond the code's calls ({sorted(actions(t, role) - wanted)})")

    # Gateway mode: the task API is TaskApiService's (check_task_api_service), so the function's
    # role holds none of what only the task API's broker calls.
    api = code_actions(*CONTROL_PLANE_AWS, without=TASK_API_CODE if gateway else ()) | shared
    for a, res in [
        ("dynamodb:PutItem", "SessionsTable"),
        ("dynamodb:GetItem", "SessionsTable"),
        ("dynamodb:UpdateItem", "SessionsTable"),
        ("dynamodb:Query", "SessionsTable"),
        ("dynamodb:GetItem", "ProjectsTable"),
        ("dynamodb:PutItem", "SlotsTable"),
        ("dynamodb:UpdateItem", "SlotsTable"),
        ("dynamodb:DeleteItem", "SlotsTable"),
        ("dynamodb:Query", "SlotsTable"),
        ("dynamodb:GetItem", "SlotsTable"),
        ("dynamodb:GetItem", "ApiKeysTable"),
        ("dynamodb:PutItem", "ContextsTable"),
        ("dynamodb:GetItem", "ContextsTable"),
        ("dynamodb:UpdateItem", "ContextsTable"),
        ("dynamodb:DeleteItem", "ContextsTable"),
        ("s3:PutObject", "ContextsBucket"),
        ("s3:DeleteObject", "ContextsBucket"),
        ("s3:GetObject", "ContextsBucket"),
        ("s3:ListBucket", "ContextsBucket"),
        ("ecs:RunTask", "NamePrefix"),
        ("ecs:StopTask", "Cluster"),
        ("ecs:ListTasks", "*"),
        ("iam:PassRole", "TaskRole"),
        ("iam:PassRole", "TaskExecutionRole"),
        ("secretsmanager:GetSecretValue", "SigningSecret"),
        ("sqs:SendMessage", "ClaimsQueue"),
    ] + ([] if gateway else TASK_API_GRANTS):
        needs("ApiFunctionRole", a, res)
    check(api <= actions(t, "ApiFunctionRole"), f"ApiFunctionRole: every call of the control plane ({sorted(api - actions(t, 'ApiFunctionRole'))})")
    # A tenant's DELETE /v1/contexts/{id} once ran a Scan of the whole sessions table: the API
    # reads by key and through indexes only, and queries the sessions table's indexes alone.
    check(
        "dynamodb:Scan" not in api and not any(a in ("dynamodb:Scan", "dynamodb:*", "*") for a in actions(t, "ApiFunctionRole")),
        "ApiFunctionRole: no dynamodb:Scan (and the code calls none)",
    )
    session_queries = [
        r
        for st in statements(t, "ApiFunctionRole")
        if "dynamodb:Query" in as_list(st["Action"])
        for r in as_list(st["Resource"])
        if "SessionsTable" in ref_names(r)
    ]
    check(
        session_queries
        and all(isinstance(r, dict) and "/index/" in str(r.get("Fn::Sub", "")) for r in session_queries)
        and any("/index/contextId-index" in str(r.get("Fn::Sub", "")) for r in session_queries),
        "ApiFunctionRole: dynamodb:Query on the sessions table's indexes only, contextId-index among them",
    )
    check(
        props(t, "ApiFunction")["Environment"]["Variables"].get("POOL_PROJECT_SHARE") == {"Ref": "PoolProjectShare"},
        "ApiFunction: POOL_PROJECT_SHARE = PoolProjectShare (a project's share of the warm pool)",
    )
    for tbl in ("ApiKeysTable", "ProjectsTable"):
        needs("AuthorizerFunctionRole", "dynamodb:GetItem", tbl)
    for tbl in ("SessionsTable", "ContextsTable", "SlotsTable"):
        needs("TaskEventsFunctionRole", "dynamodb:UpdateItem", tbl)
    needs("TaskEventsFunctionRole", "dynamodb:DeleteItem", "SlotsTable")
    needs("TaskEventsFunctionRole", "dynamodb:Query", "SessionsTable")

    # --- Step 10: what a real account enforces, retries, claims, the sweeper, scaling -------
    check_list_bucket(t)
    check_item_access(t, gateway)
    check_object_prefixes(t)
    check_task_authority(t, gateway)
    check_task_api(t, env, api_env, gateway)
    check_routes(t, gateway)
    check_retention_policies(t)
    check_sizes(t, gateway)
    check_rolls_and_logs(t)
    check_no_retry(t)
    check_claims(t, api_env)
    check_sweeper(t, api_env, needs)
    check_pool_scaling(t, env)
    check_session_events(t, needs)
    check_edge(t, t["Parameters"]["EdgeCloudFront"].get("Default") == "true", gateway)

    # --- Wiring ---------------------------------------------------------------------------
    auth = props(t, "ApiAuthorizer")
    check(auth.get("Type") == "REQUEST" and auth.get("AuthorizerResultTtlInSeconds") == 0 and not auth.get("IdentitySource"),
          "ApiAuthorizer: REQUEST, no caching, no identity source")
    rule = props(t, "TaskStoppedRule")
    check(
        rule["EventPattern"].get("detail-type") == ["ECS Task State Change"]
        and rule["EventPattern"]["detail"].get("lastStatus") == ["STOPPED"]
        and "TaskEventsFunction" in ref_names(rule["Targets"]),
        "TaskStoppedRule: stopped tasks -> TaskEventsFunction",
    )
    perms = [p["Properties"] for p in resources(t, "AWS::Lambda::Permission").values()]
    for fn, principal in [("ApiFunction", "apigateway"), ("AuthorizerFunction", "apigateway"), ("TaskEventsFunction", "events"),
                          ("SweeperFunction", "events")]:
        check(
            any(fn in ref_names(p["FunctionName"]) and p["Principal"].startswith(principal) for p in perms),
            f"{fn}: invoke permission for {principal}",
        )
    for k in ("ApiBaseUrl", "SessionsTableName", "ProjectsTableName", "ApiKeysTableName", "ContextsTableName",
              "ClaimsQueueUrl", "ContextsBucketName", "SweeperFunctionName"):
        check(k in t.get("Outputs", {}), f"Outputs: {k}")

    # --- A DependsOn names only what this mode creates (CloudFormation rejects the template
    # otherwise: a conditional one goes through a handle's Metadata, see waits_for) ------------
    for name, res in r.items():
        for d in as_list(res.get("DependsOn", [])):
            check(d in r, f"{name}: DependsOn {d}, which is not created in this mode")

    # --- checkov skips carry a reason -------------------------------------------------------
    for name, res in r.items():
        for skip in res.get("Metadata", {}).get("checkov", {}).get("skip", []):
            check(len(str(skip.get("comment", "")).strip()) >= 20, f"{name}: checkov skip {skip.get('id')} has a reason")

    # --- The connect leg --------------------------------------------------------------------
    if gateway:
        check_gateway(t, env, api_env)
        check_task_api_service(t, env, api_env)
    else:
        check_direct(t, env, api_env)



def statement_on(t, role, action, resource):
    """The Allow statements of `role` with `action` whose Resource is exactly `resource`."""
    return [
        st for st in statements(t, role)
        if st.get("Effect") == "Allow" and action in as_list(st["Action"]) and as_list(st["Resource"]) == [resource]
    ]


def grants(st, action, resource):
    """Whether statement `st` allows `action` (or a wildcard covering it) on `resource` (or *)."""
    service = action.split(":")[0]
    acts = as_list(st.get("Action", []))
    if st.get("Effect") != "Allow" or not any(a in (action, f"{service}:*", "*") for a in acts):
        return False
    return any(r == "*" or resource in ref_names(r) for r in as_list(st.get("Resource", [])))


def check_token_secrets(t, gateway=False):
    """Tokens are EdDSA: the private key's secret is read by the control plane's API alone; the
    tasks and the gateway read the public key's. Both secrets are the operator's, made before the
    stack (CloudFormation cannot make an Ed25519 pair; deploy/README.md) and passed by ARN."""
    for name in ("SigningSecret", "PublicKeySecret"):
        p = t.get("Parameters", {}).get(name, {})
        check(
            p.get("Type") == "String" and "secretsmanager" in p.get("AllowedPattern", "") and "Default" not in p,
            f"{name}: a parameter, the ARN of the operator's secret (no default)",
        )
        check(name not in t["Resources"], f"{name}: not made by the stack")
    roles = resources(t, "AWS::IAM::Role")
    readers = sorted(
        r for r in roles if any(grants(st, "secretsmanager:GetSecretValue", "SigningSecret") for st in statements(t, r))
    )
    # The task API mints the live-view credential a grant carries: in gateway mode its service's
    # role reads the key too.
    want = ["ApiFunctionRole", "TaskApiRole"] if gateway else ["ApiFunctionRole"]
    check(readers == want, f"SigningSecret: read by {' and '.join(want)} alone ({readers})")
    for r, role in roles.items():
        for arn in as_list(role["Properties"].get("ManagedPolicyArns", [])):
            check("SecretsManager" not in str(arn), f"{r}: no managed policy reaching Secrets Manager ({arn})")
    check(not resources(t, "AWS::IAM::Policy") and not resources(t, "AWS::IAM::ManagedPolicy"),
          "no standalone IAM policy (every grant is inline in its role, checked here)")
    # The gateway's role exists in gateway mode only.
    for role in [r for r in ("TaskRole", "GatewayTaskRole") if r in roles]:
        check(allowed(t, role, "secretsmanager:GetSecretValue", "PublicKeySecret"), f"{role}: reads PublicKeySecret")
        check(
            not any(grants(st, "secretsmanager:GetSecretValue", "SigningSecret") for st in statements(t, role)),
            f"{role}: cannot read SigningSecret",
        )


# --- Issue 44: managed proxies, and the proxy credentials in the claims --------------------------

# The optional parameter naming the operator's managed proxy pools secret, and the variable the
# API function reads it from (crates/control-plane/src/aws/managed_proxies.rs).
MANAGED_PROXIES_PARAM = "ManagedProxiesSecretArn"
MANAGED_PROXIES_VAR = "MANAGED_PROXIES_SECRET_ARN"
# A full secret ARN as create-secret prints it (its name, then "-" and 6 characters).
EXAMPLE_PROXIES_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:wallcrawler/managed-proxies-AbC123"
# The operator's secrets, each passed by ARN: every Secrets Manager grant names one of these.
OPERATOR_SECRETS = ("SigningSecret", "PublicKeySecret", MANAGED_PROXIES_PARAM)
# The longest the dead-letter queue may keep a claim (and the proxy credentials in it): time to
# look at a poison claim after its alarm, over a weekend.
DEAD_CLAIM_RETENTION_MAX = 4 * 24 * 3600


def environments(t):
    """{resource: {variable: value}} of every Lambda function and ECS task definition."""
    out = {}
    for name, res in t["Resources"].items():
        p = res.get("Properties", {})
        if res["Type"] == "AWS::Lambda::Function":
            out[name] = dict(p.get("Environment", {}).get("Variables", {}))
        elif res["Type"] == "AWS::ECS::TaskDefinition":
            out[name] = {e["Name"]: e["Value"] for c in p.get("ContainerDefinitions", []) for e in c.get("Environment", [])}
    return out


def check_managed_proxies(t, configured):
    """The managed proxy pools' secret is the operator's, passed by ARN (ManagedProxiesSecretArn,
    empty by default). `configured` (the parameter set): the API function alone gets
    MANAGED_PROXIES_SECRET_ARN = the parameter, and its role alone GetSecretValue on exactly
    that ARN, in a statement of its own. Empty: no variable and no grant. Every Secrets
    Manager grant of every role names one of the operator's secrets by its parameter (never
    *, a pattern or another ARN)."""
    p = t.get("Parameters", {}).get(MANAGED_PROXIES_PARAM, {})
    pattern = p.get("AllowedPattern", "")
    check(
        p.get("Type") == "String" and p.get("Default") == ""
        and re.fullmatch(pattern, "") is not None and re.fullmatch(pattern, EXAMPLE_PROXIES_ARN) is not None
        and re.fullmatch(pattern, "*") is None
        and re.fullmatch(pattern, EXAMPLE_PROXIES_ARN.rsplit(":", 1)[0] + ":*") is None,
        f"{MANAGED_PROXIES_PARAM}: an optional String parameter (default empty), a full secret ARN or nothing (never a pattern)",
    )
    check(MANAGED_PROXIES_PARAM not in t["Resources"] and not resources(t, "AWS::SecretsManager::Secret"),
          f"{MANAGED_PROXIES_PARAM}: the operator's secret, not made by the stack")
    api_bin = (ROOT / "crates/control-plane/src/bin/wallcrawler-api-lambda.rs").read_text()
    check("with_managed_proxies" in api_bin, "wallcrawler-api-lambda.rs: reads the managed proxy pools at start (with_managed_proxies)")

    # The variable: on the API function alone, the parameter itself, only when it is set.
    got = {name: env[MANAGED_PROXIES_VAR] for name, env in environments(t).items() if MANAGED_PROXIES_VAR in env}
    want = {"ApiFunction": {"Ref": MANAGED_PROXIES_PARAM}} if configured else {}
    check(got == want, f"{MANAGED_PROXIES_VAR}: {'on ApiFunction alone, = ' + MANAGED_PROXIES_PARAM if configured else 'on no function (the parameter is empty)'} ({got})")
    users = sorted(n for n, res in t["Resources"].items() if MANAGED_PROXIES_PARAM in ref_names(res))
    check(set(users) <= {"ApiFunction", "ApiFunctionRole"},
          f"{MANAGED_PROXIES_PARAM}: referred to by ApiFunction and ApiFunctionRole alone ({users})")

    # The grant: the API's role alone reads the secret, on exactly its ARN.
    action = "secretsmanager:GetSecretValue"
    roles = resources(t, "AWS::IAM::Role")
    readers = sorted(r for r in roles if any(grants(st, action, MANAGED_PROXIES_PARAM) for st in statements(t, r)))
    check(readers == (["ApiFunctionRole"] if configured else []),
          f"{MANAGED_PROXIES_PARAM}: {'read by ApiFunctionRole alone' if configured else 'read by no role (the parameter is empty)'} ({readers})")
    if configured:
        sts = [st for st in statements(t, "ApiFunctionRole") if grants(st, action, MANAGED_PROXIES_PARAM)]
        check(
            len(sts) == 1 and as_list(sts[0]["Action"]) == [action] and as_list(sts[0]["Resource"]) == [{"Ref": MANAGED_PROXIES_PARAM}],
            f"ApiFunctionRole: {action} on exactly {MANAGED_PROXIES_PARAM}, a statement of its own ({sts})",
        )
    for r in roles:
        for st in statements(t, r):
            acts = as_list(st.get("Action", []))
            if st.get("Effect") != "Allow" or not any(a.startswith("secretsmanager:") or a == "*" for a in acts):
                continue
            res = as_list(st.get("Resource", []))
            check(
                "NotResource" not in st and res
                and all(isinstance(x, dict) and list(x) == ["Ref"] and x["Ref"] in OPERATOR_SECRETS for x in res),
                f"{r}: {st.get('Sid')} reaches Secrets Manager only on the operator's secrets by their parameters ({res})",
            )


def check_claims_encrypted(t):
    """A claim carries its session's egress, proxy credentials included (crates/contract/src/
    claim.rs): both claims queues encrypted at rest (SQS managed keys or a KMS key), and the
    dead-letter queue, which keeps claims as they were sent, keeps them a little while only."""
    for q in ("ClaimsQueue", "ClaimsDeadLetterQueue"):
        p = props(t, q)
        sse = p.get("SqsManagedSseEnabled") in (True, "true") or (
            bool(p.get("KmsMasterKeyId")) and p.get("SqsManagedSseEnabled") not in (False, "false")
        )
        check(sse, f"{q}: encrypted at rest (SqsManagedSseEnabled or KmsMasterKeyId): its claims carry proxy credentials")
    live = int(props(t, "ClaimsQueue").get("MessageRetentionPeriod", 345600))
    dead = int(props(t, "ClaimsDeadLetterQueue").get("MessageRetentionPeriod", 345600))
    check(
        live < dead <= DEAD_CLAIM_RETENTION_MAX,
        f"ClaimsDeadLetterQueue: MessageRetentionPeriod ({dead}) above the claims queue's ({live}: a dead letter keeps its "
        f"first enqueue time) and at most {DEAD_CLAIM_RETENTION_MAX} (its claims carry proxy credentials)",
    )


def check_list_bucket(t):
    """Item 1: without s3:ListBucket a missing archive is 403, not 404, and a new context fails."""
    sts = statement_on(t, "SessionRole", "s3:ListBucket", {"Fn::GetAtt": ["ContextsBucket", "Arn"]})
    check(sts, "SessionRole: allows s3:ListBucket on the contexts bucket itself (else GetObject of a missing key is 403, not 404)")
    # A condition on s3:prefix would never match the GetObject request S3 checks it for.
    check(all("s3:prefix" not in str(st.get("Condition", "")) for st in sts), "SessionRole: s3:ListBucket without an s3:prefix condition")


def contract_attributes(list_name):
    """The attribute names of the contract's `attr::<list_name>`, in its order."""
    src = (ROOT / "crates/contract/src/session.rs").read_text()
    names = dict(re.findall(r'pub const ([A-Z_]+): &str = "([A-Za-z]+)";', src))
    body = re.search(rf"pub const {list_name}: \[&str; \d+\] =\s*\[(.*?)\];", src, re.S).group(1)
    return [names[c] for c in re.findall(r"[A-Z_]+", body)]


def listed_attributes():
    """The attribute names of the contract's `attr::LISTED` (what listing shows)."""
    return set(contract_attributes("LISTED"))


# What no task or gateway may read: the session's token, and the URL that carries it.
TOKEN_ATTRIBUTES = ("signingKey", "connectUrl")
# What the API writes for a session and no controller may change.
API_ONLY_ATTRIBUTES = ("signingKey", "connectUrl", "connectBase", "projectId", "contextId", "contextStorageKey", "contextPersist",
                       "keepAlive", "expiresAt", "userMetadata", "createdAt", "extensionId", "extensionKey")


def attribute_condition(st):
    """The `dynamodb:Attributes` list of a statement's ForAllValues:StringEquals, else None."""
    v = st.get("Condition", {}).get("ForAllValues:StringEquals", {}).get("dynamodb:Attributes")
    return as_list(v) if v is not None else None


def check_item_attributes(t, role, action, want, extra):
    """`role`'s only statement with `action` on the sessions table allows exactly `action`,
    only for the attributes `want` (IAM fine-grained access control), with `extra` as its
    StringEqualsIfExists; no other statement of the role reaches the table unconditioned."""
    sts = [st for st in statements(t, role) if action in as_list(st["Action"])]
    what = f"{role}: {action} only of attributes {want}"
    if not check(len(sts) == 1, f"{what} (one statement; found {len(sts)})"):
        return
    st = sts[0]
    check(as_list(st["Action"]) == [action] and "SessionsTable" in ref_names(st["Resource"]), f"{what}: its own statement, on SessionsTable")
    got = attribute_condition(st)
    check(got == want, f"{what}: ForAllValues:StringEquals dynamodb:Attributes is exactly the contract's list (got {got})")
    check(
        st.get("Condition") == {"ForAllValues:StringEquals": {"dynamodb:Attributes": want}, "StringEqualsIfExists": extra},
        f"{what}: its Condition is exactly the attribute list and StringEqualsIfExists {extra}",
    )
    # Without an attribute condition the statement reaches every attribute.
    reachable = set(TOKEN_ATTRIBUTES) if got is None else set(got)
    for secret in TOKEN_ATTRIBUTES:
        check(secret not in reachable, f"{role}: {action} cannot reach {secret}")


def check_item_access(t, gateway):
    """Tasks never read a session's token or connectUrl, and write only what a controller
    writes; the gateway reads only the route."""
    reads, writes = contract_attributes("TASK_READS"), contract_attributes("TASK_WRITES")
    for name, attrs in (("TASK_READS", reads), ("TASK_WRITES", writes), ("GATEWAY_READS", contract_attributes("GATEWAY_READS"))):
        check("sessionId" in attrs, f"contract attr::{name} names the key (dynamodb:Attributes counts it)")
        check(not set(attrs) & set(TOKEN_ATTRIBUTES), f"contract attr::{name} holds neither signingKey nor connectUrl")
    check(not set(writes) & set(API_ONLY_ATTRIBUTES), f"contract attr::TASK_WRITES holds nothing the API wrote ({sorted(set(writes) & set(API_ONLY_ATTRIBUTES))})")
    check_item_attributes(t, "SessionRole", "dynamodb:GetItem", reads, {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"})
    check_item_attributes(t, "SessionRole", "dynamodb:UpdateItem", writes, {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]})
    for role in ("SessionRole", "TaskRole"):
        for st in statements(t, role):
            if any(a.startswith("dynamodb:") or a == "*" for a in as_list(st["Action"])):
                check(attribute_condition(st) is not None, f"{role}: {st.get('Sid')} limits dynamodb:Attributes")
    if gateway:
        check_item_attributes(t, "GatewayTaskRole", "dynamodb:GetItem", contract_attributes("GATEWAY_READS"),
                              {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"})


def storage_constant(name):
    src = (ROOT / "crates/contract/src/storage.rs").read_text()
    return re.search(rf'pub const {name}: &str = "([^"]+)";', src).group(1)


def check_object_prefixes(t):
    """The session role's object statements name only the keys the controller uses (the
    contract's storage layout), each with only what it does there; never the whole bucket."""
    profile, files, ext = storage_constant("PROFILE_ARCHIVE_NAME"), storage_constant("FILES_PREFIX"), storage_constant("EXTENSIONS_PREFIX")
    want = {
        "s3:GetObject": {f"*/*/{profile}", f"{files}/*/uploads/*", f"{ext}/*"},
        "s3:PutObject": {f"*/*/{profile}", f"{files}/*/downloads/*", f"{files}/*/logs/*", f"{files}/*/recordings/*"},
        "s3:AbortMultipartUpload": {f"*/*/{profile}", f"{files}/*/downloads/*"},
        # A log chunk and a recording's objects carry their expiry tag (RECORD_TAGGING).
        "s3:PutObjectTagging": {f"{files}/*/logs/*", f"{files}/*/recordings/*"},
    }
    got = {}
    for st in statements(t, "SessionRole"):
        for a in as_list(st["Action"]):
            if a.startswith("s3:") and a != "s3:ListBucket":
                for r in as_list(st["Resource"]):
                    sub = r.get("Fn::Sub", "") if isinstance(r, dict) else ""
                    got.setdefault(a, set()).add(sub.removeprefix("${ContextsBucket.Arn}/") if sub.startswith("${ContextsBucket.Arn}/") else str(r))
    check(got == want, f"SessionRole: object statements exactly {want} under the contexts bucket (got {got})")
    # The patterns against the keys the contract forms (IAM's * matches any run of characters,
    # "/" included, as fnmatch's does), and keys the controller never uses.
    use = {
        "s3:GetObject": ["proj_1/ctx_1/profile.tar.gz", "files/proj_1/sess_1/uploads/a.txt", "extensions/proj_1/" + "0f" * 32 + ".zip"],
        "s3:PutObject": ["proj_1/ctx_1/profile.tar.gz", "files/proj_1/sess_1/downloads/a-1.csv", "files/proj_1/sess_1/logs/1700000000000-000000.jsonl", "files/proj_1/sess_1/recordings/0/seg-00001.ts", "files/proj_1/sess_1/recordings/0.json"],
        "s3:PutObjectTagging": ["files/proj_1/sess_1/logs/1700000000000-000000.jsonl", "files/proj_1/sess_1/recordings/0/seg-00001.ts"],
    }
    never = ["extension-uploads/proj_1/u.zip", "proj_1/ctx_1/other.tar.gz", "files/proj_1/sess_1/other/a", "anything"]
    for a, keys in use.items():
        for k in keys:
            check(any(fnmatch.fnmatchcase(k, p) for p in got.get(a, ())), f"SessionRole: {a} reaches {k}")
    for k in never:
        check(not any(fnmatch.fnmatchcase(k, p) for ps in got.values() for p in ps), f"SessionRole: no object statement reaches {k}")


# What the task role keeps (a warm task's own needs): the public key, and in direct mode its
# own public IP. Everything else a controller calls is its session's (SessionRole).
TASK_ROLE_SERVICES = ("secretsmanager", "ec2")
# What a task's own role must not reach at all: the session data and the other tasks.
SESSION_DATA = ("SessionsTable", "TasksTable", "ContextsBucket", "ClaimsQueue", "ClaimsDeadLetterQueue", "Cluster")


def role_arn_sub(t, role):
    """The ARN of `role` as another resource names it by its fixed RoleName (an Fn::Sub)."""
    name = props(t, role).get("RoleName", {})
    name = name.get("Fn::Sub") if isinstance(name, dict) else name
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:iam::${{AWS::AccountId}}:role/{name}"} if name else None


def reaches_role(t, st, role):
    """Whether statement `st` allows sts:AssumeRole on `role` (its ARN, its fixed name, or *)."""
    acts = as_list(st.get("Action", []))
    if st.get("Effect") != "Allow" or not any(a in ("sts:AssumeRole", "sts:*", "*") for a in acts):
        return False
    named = role_arn_sub(t, role)
    return any(r == "*" or role in ref_names(r) or (named is not None and r == named) for r in as_list(st.get("Resource", [])))


def check_task_authority(t, gateway=False):
    """Item 2 of Step 13: a task's own role reaches no session data; a session's authority
    (SessionRole) is the task API's to hand out, narrowed per session; only the task API
    receives claims. The task API's role: TaskApiRole in gateway mode (its service's), the API
    function's in direct mode."""
    server = "TaskApiRole" if gateway else "ApiFunctionRole"
    roles = sorted(resources(t, "AWS::IAM::Role"))
    # The task role: the public key (and direct mode's EC2 lookup), nothing of the sessions.
    for st in statements(t, "TaskRole"):
        acts = as_list(st["Action"])
        check(
            all(a.split(":")[0] in TASK_ROLE_SERVICES for a in acts),
            f"TaskRole: {st.get('Sid')} reaches no table, bucket, queue or ECS task ({acts})",
        )
        check(
            not ref_names(st["Resource"]) & set(SESSION_DATA),
            f"TaskRole: {st.get('Sid')} names no table, bucket, queue or cluster ({st['Resource']})",
        )
    # The session role: trusted by the task API's role alone, assumable by nobody else.
    trust = props(t, "SessionRole").get("AssumeRolePolicyDocument", {}).get("Statement", [])
    check(
        trust == [{"Effect": "Allow", "Principal": {"AWS": {"Fn::GetAtt": [server, "Arn"]}}, "Action": "sts:AssumeRole"}],
        f"SessionRole: trusted by {server} alone (its trust policy: {trust})",
    )
    assumers = sorted(r for r in roles if any(reaches_role(t, st, "SessionRole") for st in statements(t, r)))
    check(assumers == [server], f"SessionRole: only {server} may assume it ({assumers})")
    named = role_arn_sub(t, "SessionRole")
    check(
        named is not None and statement_on(t, server, "sts:AssumeRole", named),
        f"{server}: sts:AssumeRole on the SessionRole by its fixed RoleName (its trust names this role: no circle)",
    )
    # Claims: received by the task API alone; a session's credentials only settle their own.
    receivers = sorted(
        r for r in roles if any(grants(st, "sqs:ReceiveMessage", "ClaimsQueue") for st in statements(t, r))
    )
    check(receivers == [server], f"ClaimsQueue: only {server} receives claims ({receivers})")
    check(
        not any(grants(st, "sqs:ReceiveMessage", "ClaimsQueue") for st in statements(t, "SessionRole")),
        "SessionRole: cannot ReceiveMessage (the task API hands one claim to one task)",
    )
    # Nothing but the task API may pass or chain into a role that reaches the session data.
    for r in roles:
        if r != server:
            check(not any(grants(st, "sts:AssumeRole", "*") for st in statements(t, r)), f"{r}: no sts:AssumeRole on any role")


def waits_for(t, name, target):
    """Whether resource `name` waits for `target`: its DependsOn names it, or names a handle
    whose Metadata refers to it (a DependsOn cannot name a resource of a false condition)."""
    deps = as_list(t["Resources"].get(name, {}).get("DependsOn", []))
    return target in deps or any(target in ref_names(t["Resources"].get(d, {}).get("Metadata", {})) for d in deps)


def container(t, td):
    """The only container of task definition `td` (an empty one when it has none or several)."""
    cs = props(t, td).get("ContainerDefinitions", [])
    return cs[0] if len(cs) == 1 else {}


def container_env(c):
    return {e["Name"]: e["Value"] for e in c.get("Environment", [])}


def https_of(wss):
    """The https:// URL of the same host as a wss:// base URL, as the template spells it."""
    if isinstance(wss, str):
        return wss.replace("wss://", "https://", 1) if wss.startswith("wss://") else None
    if isinstance(wss, dict) and list(wss) == ["Fn::Sub"] and isinstance(wss["Fn::Sub"], str) and wss["Fn::Sub"].startswith("wss://"):
        return {"Fn::Sub": "https://" + wss["Fn::Sub"][len("wss://"):]}
    return None


def check_task_api(t, task_env, api_env, gateway=False):
    """The task API's configuration: the tasks find it, the task API knows who a task is, where
    the one-session-per-task marker goes and which role it hands out. Gateway mode: the task API
    service's (TaskApiTaskDefinition), reached at the internal load balancer's address with the
    connect host's name; the API function has none of it (it serves no /v1/internal route).
    Direct mode: the API function's, at the execute-api URL."""
    url = task_env.get("TASK_API_URL")
    if not gateway:
        check(
            url == {"Fn::Sub": "https://${RestApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${StageName}"},
            f"TaskDefinition: TASK_API_URL is the API's execute-api URL with its stage ({url})",
        )
        check("TASK_API_ADDRESS" not in task_env, "TaskDefinition: no TASK_API_ADDRESS in direct mode (the execute-api host itself)")
        server, server_env = "ApiFunction", api_env
    else:
        # The connect host: ConnectDomainName, else the connect load balancer's name (what the
        # API's CONNECT_BASE_URL names, and ConnectCertificateArn covers).
        host = https_of(api_env.get("CONNECT_BASE_URL"))
        check(host is not None and url == host,
              f"TaskDefinition: TASK_API_URL is https:// on the connect host, the API's CONNECT_BASE_URL's ({url}; want {host})")
        address = task_env.get("TASK_API_ADDRESS")
        check(address == {"Fn::GetAtt": ["TaskApiLoadBalancer", "DNSName"]},
              f"TaskDefinition: TASK_API_ADDRESS is the internal load balancer's DNS name ({address})")
        for var in TASK_API_VARS:
            check(var not in api_env, f"ApiFunction: no {var} in gateway mode (the task API is TaskApiService's; the function serves no /v1/internal route)")
        for a, res in TASK_API_GRANTS:
            check(not any(grants(st, a, res) for st in statements(t, "ApiFunctionRole")),
                  f"ApiFunctionRole: no {a} on {res} in gateway mode (the task API is TaskApiService's: TaskApiRole)")
        server, server_env = "TaskApiTaskDefinition", container_env(container(t, "TaskApiTaskDefinition"))
    for var, want in TASK_API_VARS.items():
        check(server_env.get(var) == want, f"{server}: {var} = {want} ({server_env.get(var)})")
    check(
        "POOL_CLAIM_VISIBILITY_SECONDS" not in task_env or server_env.get("POOL_CLAIM_VISIBILITY_SECONDS") == task_env["POOL_CLAIM_VISIBILITY_SECONDS"],
        f"{server}: POOL_CLAIM_VISIBILITY_SECONDS as the pool's (the task API receives for the pool's tasks)",
    )
    target = "TaskApiService" if gateway else "ApiStage"
    check(waits_for(t, "PoolService", target), f"PoolService: waits for {target} (its tasks take their claims from the task API)")


def resource_paths(t):
    """Each AWS::ApiGateway::Resource's full path ("/v1/internal/{proxy+}"), by logical id."""
    res = resources(t, "AWS::ApiGateway::Resource")

    def path(name, seen=()):
        p = res[name]["Properties"]
        parent = p.get("ParentId")
        if isinstance(parent, dict) and parent.get("Ref") in res and name not in seen:
            return path(parent["Ref"], seen + (name,)) + "/" + p["PathPart"]
        return "/" + p["PathPart"]

    return {name: path(name) for name in res}


# The task API's route: the only API route API Gateway passes on without the API-key authorizer.
INTERNAL_PATH = "/v1/internal/{proxy+}"
# The dashboard's static page, GET only: a browser opens it with no key (it holds no data).
DASHBOARD_ROUTE = ("/dashboard", "GET")


def check_routes(t, gateway=False):
    """Every method of the API goes to the API function (Lambda proxy). Direct mode: all but the
    task API's POST /v1/internal/{proxy+} and the dashboard's GET /dashboard behind the API-key
    authorizer. Gateway mode: every one but GET /dashboard behind it, and no resource under
    /v1/internal (the task API is TaskApiService's)."""
    paths = resource_paths(t)
    open_methods = []
    for name, m in resources(t, "AWS::ApiGateway::Method").items():
        p = m["Properties"]
        rid = p.get("ResourceId", {})
        path = paths.get(rid.get("Ref")) if isinstance(rid, dict) else None
        check(
            p.get("Integration", {}).get("Type") == "AWS_PROXY" and "ApiFunction" in ref_names(p["Integration"].get("Uri")),
            f"{name}: Lambda proxy to ApiFunction",
        )
        if p.get("AuthorizationType") == "CUSTOM" and p.get("AuthorizerId") == {"Ref": "ApiAuthorizer"}:
            continue
        if (path, p.get("HttpMethod")) == DASHBOARD_ROUTE:
            continue
        open_methods.append((name, path, p.get("HttpMethod")))
    if gateway:
        internal = sorted(p for p in paths.values() if p == "/v1/internal" or p.startswith("/v1/internal/"))
        check(not internal, f"gateway mode: no API Gateway resource under /v1/internal (the task API is TaskApiService's) ({internal})")
        check(not open_methods, f"gateway mode: every method behind the API-key authorizer ({open_methods})")
    else:
        check(
            len(open_methods) == 1 and open_methods[0][1:] == (INTERNAL_PATH, "POST"),
            f"only POST {INTERNAL_PATH} is without the API-key authorizer ({open_methods})",
        )
    # Every other /v1 path still reaches the function behind the authorizer.
    guarded = {paths.get(m["Properties"]["ResourceId"].get("Ref")) for m in resources(t, "AWS::ApiGateway::Method").values()
               if m["Properties"].get("AuthorizationType") == "CUSTOM"}
    check({"/{proxy+}", "/v1/{proxy+}"} <= guarded, f"/{{proxy+}} and /v1/{{proxy+}} behind the authorizer ({sorted(p for p in guarded if p)})")


def check_retention_policies(t):
    """Item 2: kept when the stack is deleted, removed when its first create rolls back."""
    for name in ("SessionsTable", "ProjectsTable", "ApiKeysTable", "ContextsTable", "SlotsTable", "TasksTable", "ContextsBucket"):
        r = t["Resources"].get(name, {})
        check(
            r.get("DeletionPolicy") == "RetainExceptOnCreate" and r.get("UpdateReplacePolicy") == "Retain",
            f"{name}: DeletionPolicy RetainExceptOnCreate, UpdateReplacePolicy Retain",
        )
    params = t["Parameters"]
    # Every subnet parameter (SubnetIds, PrivateSubnetIds) of the subnet type, so the rule below
    # (Fn::ValueOfAll takes every parameter of the type) checks it against VpcId; a plain list
    # would only fail at CreateService, minutes in.
    subnet_params = sorted(n for n in params if "subnet" in n.lower())
    check({"SubnetIds", "PrivateSubnetIds"} <= set(subnet_params), f"Parameters: SubnetIds and PrivateSubnetIds ({subnet_params})")
    for n in subnet_params:
        check(params[n].get("Type") in ("List<AWS::EC2::Subnet::Id>", "AWS::EC2::Subnet::Id"),
              f"{n}: List<AWS::EC2::Subnet::Id> (checked against VpcId by the SubnetsInVpc rule; {params[n].get('Type')})")
    check(
        any(
            a.get("Assert") == {"Fn::EachMemberEquals": [{"Fn::ValueOfAll": ["AWS::EC2::Subnet::Id", "VpcId"]}, {"Ref": "VpcId"}]}
            and "RuleCondition" not in rule
            for rule in t.get("Rules", {}).values()
            for a in rule.get("Assertions", [])
        ),
        "Rules: every AWS::EC2::Subnet::Id parameter's subnets are in VpcId (Fn::EachMemberEquals, Fn::ValueOfAll)",
    )


# Fargate's CPU units -> the memory sizes (MiB) it accepts with them (AWS::ECS::TaskDefinition's Cpu).
FARGATE = {
    "256": {512, 1024, 2048},
    "512": set(range(1024, 4097, 1024)),
    "1024": set(range(2048, 8193, 1024)),
    "2048": set(range(4096, 16385, 1024)),
    "4096": set(range(8192, 30721, 1024)),
    "8192": set(range(16384, 61441, 4096)),
    "16384": set(range(32768, 122881, 8192)),
}


def check_sizes(t, gateway):
    """Item 2: one size parameter per task definition, each value a pair Fargate accepts."""
    params = t["Parameters"]
    for gone in ("TaskCpu", "TaskMemory", "GatewayCpu", "GatewayMemory"):
        check(gone not in params, f"Parameters: no free {gone} (a size parameter mapped to valid pairs instead)")
    defs = [("TaskSize", "TaskSizes", "TaskDefinition")]
    if gateway:
        defs.append(("GatewaySize", "GatewaySizes", "GatewayTaskDefinition"))
    for param, mapping, td_name in defs:
        sizes = t.get("Mappings", {}).get(mapping, {})
        allowed_values = params.get(param, {}).get("AllowedValues", [])
        check(allowed_values and params[param].get("Default") in allowed_values, f"{param}: allowed values and a default among them")
        for v in allowed_values:
            pair = sizes.get(v, {})
            check(
                int(pair.get("Memory", 0)) in FARGATE.get(str(pair.get("Cpu")), set()),
                f"{mapping}: {v} = {pair} is a CPU/memory pair Fargate accepts",
            )
        td = props(t, td_name)
        for k in ("Cpu", "Memory"):
            check(td.get(k) == {"Fn::FindInMap": [mapping, {"Ref": param}, k]}, f"{td_name}: {k} from {mapping}[{param}]")
        smallest = min((int(sizes[v]["Memory"]) for v in allowed_values if v in sizes), default=0)
        for c in td.get("ContainerDefinitions", []):
            check(int(c.get("MemoryReservation", 0)) <= smallest, f"{td_name}: MemoryReservation fits the smallest {param}")


def api_definition_hash(raw):
    """The first 8 hex digits of the SHA-256 of the API's definition as written in the template."""
    d = {k: v for k, v in raw["Resources"].items() if v["Type"] in API_DEFINITION_TYPES}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:8]


API_DEFINITION_TYPES = (
    "AWS::ApiGateway::RestApi",
    "AWS::ApiGateway::Resource",
    "AWS::ApiGateway::Method",
    "AWS::ApiGateway::Authorizer",
    "AWS::ApiGateway::GatewayResponse",
)


def check_redeploy(raw):
    """Item 2: the API's deployment is replaced (a new snapshot) whenever its definition changes."""
    deployments = resources(raw, "AWS::ApiGateway::Deployment")
    want = "ApiDeployment" + api_definition_hash(raw)
    check(
        list(deployments) == [want],
        f"the API deployment's logical id follows the API's definition: rename {sorted(deployments)} to {want} "
        "(and the stage's DeploymentId); CloudFormation redeploys only a replaced deployment",
    )
    if want not in deployments:
        return
    parts = [k for k, v in raw["Resources"].items() if v["Type"] in ("AWS::ApiGateway::Method", "AWS::ApiGateway::GatewayResponse")]
    # A conditional method (direct mode's InternalMethod) through a handle's Metadata: a
    # DependsOn cannot name a resource whose condition is false.
    missing = sorted(p for p in parts if not waits_for(raw, want, p))
    check(not missing, f"{want}: DependsOn every method and gateway response ({missing})")
    conditional = {k for k, v in raw["Resources"].items() if "Condition" in v}
    named = sorted(set(as_list(raw["Resources"][want].get("DependsOn", []))) & conditional)
    check(not named, f"{want}: DependsOn no resource of a condition (invalid where it is false: {named})")
    stages = [v["Properties"] for v in resources(raw, "AWS::ApiGateway::Stage").values()]
    check(stages and all(st.get("DeploymentId") == {"Ref": want} for st in stages), f"ApiStage: DeploymentId = {want}")


def check_rolls_and_logs(t):
    """Item 2: image rolls without a second full pool; logging that never blocks."""
    dc = props(t, "PoolService").get("DeploymentConfiguration", {})
    hi, lo = int(dc.get("MaximumPercent", 200)), int(dc.get("MinimumHealthyPercent", 100))
    check(hi < 200, f"PoolService: MaximumPercent below 200 (a roll must not start a second full pool; {hi})")
    # ECS rounds the maximum down and the minimum up: at the smallest desired count there must
    # still be room to start a task or to stop one, or a roll never moves.
    n = int(t["Parameters"]["PoolSize"]["MinValue"])
    check(n * hi // 100 > n or -(-n * lo // 100) < n, f"PoolService: a roll can move at PoolSize {n} (MaximumPercent {hi}, MinimumHealthyPercent {lo})")
    for name, td in resources(t, "AWS::ECS::TaskDefinition").items():
        for c in td["Properties"]["ContainerDefinitions"]:
            opts = c.get("LogConfiguration", {}).get("Options", {})
            check(
                opts.get("mode") == "non-blocking" and re.fullmatch(r"[0-9]+[kmg]", str(opts.get("max-buffer-size", ""))),
                f"{name}: awslogs mode non-blocking with a max-buffer-size",
            )
    readme = (ROOT / "deploy/README.md").read_text()
    for svc in ("ecs.amazonaws.com", "elasticloadbalancing.amazonaws.com", "ecs.application-autoscaling.amazonaws.com"):
        check(f"create-service-linked-role --aws-service-name {svc}" in readme, f"deploy/README.md: how to create the {svc} service-linked role")
    check("## Rolling the image" in readme, "deploy/README.md: the image roll procedure (## Rolling the image)")


# What API Gateway answers itself that must say "don't retry" (item 3).
NO_RETRY = ("INTEGRATION_TIMEOUT", "INTEGRATION_FAILURE", "DEFAULT_5XX", "THROTTLED", "DEFAULT_4XX")


def check_no_retry(t):
    """Item 3: API Gateway's own errors carry x-should-retry: false (no duplicate creates)."""
    got = {}
    for gr in resources(t, "AWS::ApiGateway::GatewayResponse").values():
        p = gr["Properties"]
        if "RestApi" in ref_names(p.get("RestApiId")):
            got[p.get("ResponseType")] = p.get("ResponseParameters", {})
    for rtype in NO_RETRY:
        check(
            got.get(rtype, {}).get("gatewayresponse.header.x-should-retry") == "'false'",
            f"GatewayResponse {rtype}: header x-should-retry: false",
        )
    throttle = props(t, "ApiStage").get("MethodSettings", [{}])[0]
    check(
        throttle.get("ThrottlingRateLimit") == {"Ref": "ApiThrottleRateLimit"}
        and throttle.get("ThrottlingBurstLimit") == {"Ref": "ApiThrottleBurstLimit"},
        "ApiStage: throttle rate and burst from ApiThrottleRateLimit and ApiThrottleBurstLimit",
    )


def check_claims(t, api_env):
    """Item 4: the API gets the claim deadlines; the queue keeps a claim past the longest one."""
    params = t["Parameters"]
    for var, param in (("CLAIM_WAIT_SECONDS", "ClaimWaitSeconds"), ("CLAIM_WAIT_MAX_SECONDS", "ClaimWaitMaxSeconds")):
        check(api_env.get(var) == {"Ref": param}, f"ApiFunction: {var} = {param}")
    longest = int(params["ClaimWaitMaxSeconds"]["MaxValue"])
    check(int(params["ClaimWaitSeconds"]["MaxValue"]) <= longest, "ClaimWaitSeconds: at most ClaimWaitMaxSeconds' ceiling")
    retention = int(props(t, "ClaimsQueue").get("MessageRetentionPeriod", 345600))
    check(
        longest + 60 <= retention <= longest + 900,
        f"ClaimsQueue: MessageRetentionPeriod ({retention}) a little over the longest claim deadline ({longest})",
    )
    a = props(t, "ClaimsDeadLetterAlarm")
    check(
        a.get("Namespace") == "AWS/SQS" and a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and a.get("Dimensions", [{}])[0].get("Value") == {"Fn::GetAtt": ["ClaimsDeadLetterQueue", "QueueName"]}
        and a.get("ComparisonOperator") == "GreaterThanThreshold" and a.get("Threshold") == 0,
        "ClaimsDeadLetterAlarm: any claim visible in the dead-letter queue",
    )


def check_alarm_topic(raw):
    """Item 5: with AlarmEmail set, the dead-letter alarm mails it."""
    t = resolve(raw, {"AlarmEmail": "ops@example.com"})
    topic = props(t, "AlarmTopic") if "AlarmTopic" in t["Resources"] else {}
    check(
        topic.get("Subscription") == [{"Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}],
        "AlarmTopic: subscribes AlarmEmail when it is set",
    )
    check(props(t, "ClaimsDeadLetterAlarm").get("AlarmActions") == [{"Ref": "AlarmTopic"}], "ClaimsDeadLetterAlarm: notifies AlarmTopic")


# (action, resource) the sweeper's role allows, nothing else: the index it finds stranded
# sessions by, the items it ends, the slot and the lease it gives back, the task it stops.
SWEEPER_GRANTS = {
    ("dynamodb:Query", "status-expiresAt-index"),
    ("dynamodb:GetItem", "SessionsTable"),
    ("dynamodb:UpdateItem", "SessionsTable"),
    ("dynamodb:UpdateItem", "SlotsTable"),
    ("dynamodb:DeleteItem", "SlotsTable"),
    ("dynamodb:UpdateItem", "ContextsTable"),
    ("ecs:StopTask", "Cluster"),
}


def check_sweeper(t, api_env, needs):
    """Item 5: the sweeper, every minute, with exactly the permissions its work needs."""
    fn = props(t, "SweeperFunction")
    check(fn.get("Code", {}).get("S3Key") == {"Ref": "SweeperLambdaKey"}, "SweeperFunction: code at SweeperLambdaKey")
    env = fn.get("Environment", {}).get("Variables", {})
    for var in ("SESSIONS_TABLE_NAME", "SLOTS_TABLE_NAME", "CONTEXTS_TABLE_NAME", "ECS_CLUSTER"):
        check(var in env and env.get(var) == api_env.get(var), f"SweeperFunction: {var} as the API function's")
    rules = [r["Properties"] for r in resources(t, "AWS::Events::Rule").values()]
    check(
        any(r.get("ScheduleExpression") == "rate(1 minute)" and "SweeperFunction" in ref_names(r.get("Targets")) for r in rules),
        "SweeperFunction: run by an EventBridge schedule rate(1 minute)",
    )
    for action, res in SWEEPER_GRANTS:
        if res == "status-expiresAt-index":
            check(
                statement_on(t, "SweeperFunctionRole", action, {"Fn::Sub": "${SessionsTable.Arn}/index/status-expiresAt-index"}),
                "SweeperFunctionRole: allows dynamodb:Query on the sessions table's status-expiresAt-index",
            )
        else:
            needs("SweeperFunctionRole", action, res)
    granted = actions(t, "SweeperFunctionRole") - {"logs:CreateLogStream", "logs:PutLogEvents"}
    check(granted <= {a for a, _ in SWEEPER_GRANTS}, f"SweeperFunctionRole: nothing beyond its work ({sorted(granted)})")
    # Every grant is a call the control plane's adapters make (the sweeper goes through them).
    called = code_actions(*CONTROL_PLANE_AWS, *SWEEPER_CODE)
    check(granted <= called, f"SweeperFunctionRole: only calls the control plane makes ({sorted(granted - called)})")
    lambda_sh = (ROOT / "scripts/lambda.sh").read_text()
    moto_stack = (ROOT / "deploy/moto_stack.py").read_text()
    check("wallcrawler-sweeper-lambda" in lambda_sh, "scripts/lambda.sh: packages wallcrawler-sweeper-lambda")
    check('"SweeperLambdaKey"' in moto_stack, "deploy/moto_stack.py: uploads the SweeperLambdaKey zip")
    check((ROOT / SWEEPER_CODE[0]).is_file(), f"SweeperFunction: {SWEEPER_CODE[0]} exists")


def idle_metric(alarm):
    """The MetricStat of an alarm's metric math on IdleWarmTasks, and its expression."""
    ms = [m for m in alarm.get("Metrics", []) if "MetricStat" in m]
    ex = [m for m in alarm.get("Metrics", []) if m.get("ReturnData") and "Expression" in m]
    return (ms[0]["MetricStat"] if len(ms) == 1 else {}), (ex[0]["Expression"] if len(ex) == 1 else "")


def check_pool_scaling(t, task_env):
    """Item 7: the pool scales on idle warm tasks (10-s metric), claims waiting as a backstop."""
    params = t["Parameters"]
    check(int(params["PoolMaxSize"]["MaxValue"]) >= 1000, "PoolMaxSize: ceiling at least 1,000")
    check("PoolIdleTarget" in params, "Parameters: PoolIdleTarget (W)")
    st = props(t, "PoolScalableTarget")
    check(
        st.get("MinCapacity") == {"Ref": "PoolSize"} and st.get("MaxCapacity") == {"Ref": "PoolMaxSize"}
        and st.get("ScalableDimension") == "ecs:service:DesiredCount",
        "PoolScalableTarget: the pool service's desired count, PoolSize..PoolMaxSize",
    )
    namespace, pool = task_env.get("POOL_METRIC_NAMESPACE"), task_env.get("POOL_METRIC_POOL")
    check(namespace and pool, "TaskDefinition: POOL_METRIC_NAMESPACE and POOL_METRIC_POOL (the idle metric)")
    for alarm, policy, op, target in (
        ("PoolIdleLowAlarm", "PoolIdleOutPolicy", "GreaterThanThreshold", "${PoolIdleTarget} - FILL(idle, 0)"),
        ("PoolIdleHighAlarm", "PoolScaleInPolicy", "GreaterThanThreshold", "FILL(idle, 0) - 2 * ${PoolIdleTarget}"),
    ):
        a = props(t, alarm)
        stat, expr = idle_metric(a)
        m = stat.get("Metric", {})
        check(
            m.get("Namespace") == namespace and m.get("MetricName") == "IdleWarmTasks"
            and m.get("Dimensions") == [{"Name": "Pool", "Value": pool}]
            and stat.get("Period") == 10 and stat.get("Stat") == "Sum",
            f"{alarm}: Sum of {namespace}/IdleWarmTasks (Pool = POOL_METRIC_POOL) per 10 s",
        )
        check(expr == {"Fn::Sub": target} and a.get("Threshold") == 0 and a.get("ComparisonOperator") == op,
              f"{alarm}: {target} > 0")
        check(a.get("AlarmActions") == [{"Ref": policy}], f"{alarm}: drives {policy}")
    steps = props(t, "PoolIdleOutPolicy")["StepScalingPolicyConfiguration"]["StepAdjustments"]
    lows = [s.get("MetricIntervalLowerBound") for s in steps]
    check(lows[0] == 0 and all(s.get("MetricIntervalUpperBound") == n for s, n in zip(steps, lows[1:]))
          and "MetricIntervalUpperBound" not in steps[-1], "PoolIdleOutPolicy: steps cover every deficit from 0 up, no gap")
    check(all(0 < s["ScalingAdjustment"] <= max(1, s["MetricIntervalLowerBound"]) for s in steps),
          "PoolIdleOutPolicy: each step adds at most the deficit (so at most W at once)")
    adj = props(t, "PoolScaleInPolicy")["StepScalingPolicyConfiguration"]["StepAdjustments"]
    check([s["ScalingAdjustment"] for s in adj] == [-1], "PoolScaleInPolicy: removes one task")
    check(int(props(t, "PoolIdleHighAlarm").get("EvaluationPeriods", 0)) * 10 >= 300, "PoolIdleHighAlarm: surplus for 5 minutes")
    a = props(t, "ClaimsWaitingAlarm")
    check(
        a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and a.get("Dimensions", [{}])[0].get("Value") == {"Fn::GetAtt": ["ClaimsQueue", "QueueName"]}
        and a.get("AlarmActions") == [{"Ref": "PoolScaleOutPolicy"}],
        "ClaimsWaitingAlarm: claims waiting in the queue drive PoolScaleOutPolicy (the backstop)",
    )
    check("IdleWarmTasks" in sources("src/**/*.rs"), "the controller writes the IdleWarmTasks metric (src/)")

def ingress(t, group):
    """The ingress rules of security group `group`: inline, and AWS::EC2::SecurityGroupIngress
    resources naming it."""
    rules = list(props(t, group).get("SecurityGroupIngress", []))
    for res in resources(t, "AWS::EC2::SecurityGroupIngress").values():
        if group in ref_names(res["Properties"].get("GroupId")):
            rules.append(res["Properties"])
    return rules


def check_gateway(t, task_env, api_env):
    r = t["Resources"]
    for name in ("ConnectLoadBalancer", "ConnectListener", "GatewayTargetGroup", "GatewaySecurityGroup",
                 "GatewayTaskRole", "GatewayTaskDefinition", "GatewayService", "GatewayScalableTarget"):
        check(name in r, f"{name} exists")
    if not all(n in r for n in ("ConnectLoadBalancer", "ConnectListener", "GatewayTargetGroup",
                                "GatewaySecurityGroup", "GatewayTaskRole", "GatewayTaskDefinition", "GatewayService")):
        return

    # No browser task (nor the gateway) has a public address.
    for name, svc in resources(t, "AWS::ECS::Service").items():
        vpc = svc["Properties"].get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
        check(vpc.get("AssignPublicIp", "DISABLED") == "DISABLED", f"{name}: AssignPublicIp DISABLED")
        check("PrivateSubnetIds" in ref_names(vpc.get("Subnets")) and "SubnetIds" not in ref_names(vpc.get("Subnets")),
              f"{name}: runs in PrivateSubnetIds")
    check(api_env.get("ECS_ASSIGN_PUBLIC_IP") == "DISABLED", "ApiFunction: ECS_ASSIGN_PUBLIC_IP DISABLED")
    check("PrivateSubnetIds" in ref_names(api_env.get("ECS_SUBNETS")), "ApiFunction: ECS_SUBNETS = PrivateSubnetIds")

    # 9223 on the browser tasks: only from the gateway's security group, never a range.
    rules = ingress(t, "TaskSecurityGroup")
    check(rules, "TaskSecurityGroup: has its ingress rule")
    for rule in rules:
        check(
            rule.get("IpProtocol") == "tcp" and rule.get("FromPort") == 9223 and rule.get("ToPort") == 9223,
            f"TaskSecurityGroup: ingress is tcp 9223 only ({rule})",
        )
        check(
            "GatewaySecurityGroup" in ref_names(rule.get("SourceSecurityGroupId"))
            and not any(k in rule for k in ("CidrIp", "CidrIpv6", "SourcePrefixListId")),
            f"TaskSecurityGroup: 9223 open only to the gateway's security group ({rule})",
        )
    # The gateway: only from the load balancer's security group.
    for rule in ingress(t, "GatewaySecurityGroup"):
        check(
            "ConnectLoadBalancerSecurityGroup" in ref_names(rule.get("SourceSecurityGroupId"))
            and not any(k in rule for k in ("CidrIp", "CidrIpv6", "SourcePrefixListId")),
            f"GatewaySecurityGroup: open only to the load balancer's security group ({rule})",
        )

    lb = props(t, "ConnectLoadBalancer")
    check(lb.get("Type") == "network" and lb.get("Scheme") == "internet-facing", "ConnectLoadBalancer: internet-facing NLB")
    check("ConnectLoadBalancerSecurityGroup" in ref_names(lb.get("SecurityGroups")), "ConnectLoadBalancer: has its security group")
    ln = props(t, "ConnectListener")
    check(
        ln.get("Protocol") == "TLS" and ln.get("Port") == 443
        and "ConnectCertificateArn" in ref_names(ln.get("Certificates"))
        and str(ln.get("SslPolicy", "")).startswith("ELBSecurityPolicy-TLS13"),
        "ConnectListener: TLS 443 with ConnectCertificateArn and a TLS 1.3 policy",
    )
    check(
        [a.get("Type") for a in ln.get("DefaultActions", [])] == ["forward"]
        and "GatewayTargetGroup" in ref_names(ln["DefaultActions"]),
        "ConnectListener: forwards to GatewayTargetGroup",
    )
    tg = props(t, "GatewayTargetGroup")
    attrs = {a["Key"]: str(a["Value"]) for a in tg.get("TargetGroupAttributes", [])}
    check(attrs.get("proxy_protocol_v2.enabled") == "true", "GatewayTargetGroup: PROXY protocol v2 on")
    check(tg.get("Protocol") == "TCP" and tg.get("TargetType") == "ip", "GatewayTargetGroup: TCP to ip targets (Fargate)")
    check(tg.get("HealthCheckPath") == "/health" and tg.get("HealthCheckProtocol") == "HTTP", "GatewayTargetGroup: HTTP health check on /health")

    # The gateway's task: the controller's gateway mode, configured only with what it reads.
    td = props(t, "GatewayTaskDefinition")
    check(td.get("NetworkMode") == "awsvpc" and td.get("RequiresCompatibilities") == ["FARGATE"], "GatewayTaskDefinition: Fargate, awsvpc")
    check("GatewayTaskRole" in ref_names(td.get("TaskRoleArn")), "GatewayTaskDefinition: its own task role")
    (c,) = td["ContainerDefinitions"]
    check(c.get("Command") == ["gateway"], "GatewayTaskDefinition: command [gateway] (the controller's gateway mode)")
    genv = {e["Name"]: e["Value"] for e in c.get("Environment", [])}
    read = env_names_read(*CONTROLLER_CONFIG)
    for name in genv:
        check_read(name, read, f"GatewayTaskDefinition: {name} is read by src/config/")
    for name in ("GATEWAY_LISTEN", "SESSIONS_TABLE_NAME", "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "TRUSTED_PROXY_NETWORKS"):
        check(name in genv, f"GatewayTaskDefinition: sets {name}")
    check(
        not any("SigningSecret" in ref_names(v) for v in genv.values()),
        "GatewayTaskDefinition: never the signing secret",
    )
    check("SessionsTable" in ref_names(genv.get("SESSIONS_TABLE_NAME")), "GatewayTaskDefinition: SESSIONS_TABLE_NAME is the sessions table")
    check("VpcCidr" in ref_names(genv.get("TRUSTED_PROXY_NETWORKS")), "GatewayTaskDefinition: TRUSTED_PROXY_NETWORKS = VpcCidr (the NLB's nodes)")
    port = str(genv.get("GATEWAY_LISTEN", "")).rpartition(":")[2]
    check(
        port == "9223" and [p.get("ContainerPort") for p in c.get("PortMappings", [])] == [9223] and tg.get("Port") == 9223,
        "GatewayTaskDefinition: GATEWAY_LISTEN, the container port and the target group agree (9223)",
    )
    hc = c.get("HealthCheck", {}).get("Command", [])
    check(any("127.0.0.1:9223/health" in str(x) for x in hc), "GatewayTaskDefinition: health check on /health")
    svc = props(t, "GatewayService")
    check(
        [(b.get("ContainerName"), b.get("ContainerPort")) for b in svc.get("LoadBalancers", [])] == [("gateway", 9223)]
        and "GatewayTargetGroup" in ref_names(svc["LoadBalancers"]),
        "GatewayService: registered in GatewayTargetGroup",
    )
    check("GatewaySecurityGroup" in ref_names(svc.get("NetworkConfiguration")), "GatewayService: in GatewaySecurityGroup")
    policies = [p["Properties"] for p in resources(t, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
                if "GatewayScalableTarget" in ref_names(p["Properties"].get("ScalingTargetId"))]
    check(
        any(p.get("PolicyType") == "TargetTrackingScaling"
            and p["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]["PredefinedMetricType"]
            == "ECSServiceAverageCPUUtilization" for p in policies),
        "GatewayScalableTarget: CPU target tracking",
    )

    # The gateway's role: the session item read and the key, nothing more.
    check(
        actions(t, "GatewayTaskRole") == {"dynamodb:GetItem", "secretsmanager:GetSecretValue"},
        f"GatewayTaskRole: only dynamodb:GetItem and secretsmanager:GetSecretValue ({sorted(actions(t, 'GatewayTaskRole'))})",
    )
    for a, res in (("dynamodb:GetItem", "SessionsTable"), ("secretsmanager:GetSecretValue", "PublicKeySecret")):
        check(allowed(t, "GatewayTaskRole", a, res), f"GatewayTaskRole: allows {a} on {res}")
    for st in statements(t, "GatewayTaskRole"):
        check("*" not in as_list(st["Resource"]), f"GatewayTaskRole: {st.get('Sid')} is scoped to a resource")

    # Browser tasks behind the gateway: no EC2 lookup, the gateway trusted for PROXY headers.
    check("ec2:DescribeNetworkInterfaces" not in actions(t, "TaskRole"), "TaskRole: no ec2:DescribeNetworkInterfaces behind the gateway")
    check("PUBLIC_IP_REQUIRED" not in task_env, "TaskDefinition: no PUBLIC_IP_REQUIRED behind the gateway")
    check("VpcCidr" in ref_names(task_env.get("TRUSTED_PROXY_NETWORKS")), "TaskDefinition: TRUSTED_PROXY_NETWORKS = VpcCidr (the gateway's)")

    # The create answers at once with the gateway's URL.
    base = api_env.get("CONNECT_BASE_URL")
    check(base is not None and "wss://" in str(base), f"ApiFunction: CONNECT_BASE_URL is a wss:// URL ({base})")
    out = t.get("Outputs", {}).get("ConnectUrl", {})
    check(out and out.get("Value") == base, "Outputs: ConnectUrl = the API's CONNECT_BASE_URL")


# --- Step 19 item 2: the task API off the customer edge (gateway mode) --------------------------

# The task API service's resources (gateway mode; none in direct mode).
TASK_API_RESOURCES = ("TaskApiLoadBalancerSecurityGroup", "TaskApiLoadBalancer", "TaskApiListener", "TaskApiListenerRule",
                      "TaskApiTargetGroup", "TaskApiSecurityGroup", "TaskApiLogGroup", "TaskApiRole", "TaskApiTaskDefinition",
                      "TaskApiService")
# The only requests the internal listener forwards: the task API's routes (the contract's
# CLAIMS_PATH and CREDENTIALS_PATH), POST alone.
TASK_API_PATTERN = "/v1/internal/*"
# What the task API service's environment has beyond the API function's (whose variables it
# has with the same values, but the managed proxy pools' secret, which it does not read).
TASK_API_OWN_VARS = {"LOG_FORMAT", "AWS_REGION", "TASK_API_LISTEN"} | set(TASK_API_VARS)
TASK_API_NOT_VARS = {MANAGED_PROXIES_VAR}


def long_poll_seconds():
    """The longest a task API request takes: the contract's MAX_WAIT_SECONDS plus 5 s to take
    the session, assume the SessionRole and answer."""
    src = (ROOT / "crates/contract/src/task_api.rs").read_text()
    return int(re.search(r"MAX_WAIT_SECONDS: u64 = (\d+);", src).group(1)) + 5


def role_grants(t, role):
    """{(action, logical id)} of `role`'s Allow statements; a resource naming no logical id is
    kept as its JSON (so it matches no expected grant), the SessionRole's fixed-name ARN as
    SessionRole."""
    out = set()
    named = role_arn_sub(t, "SessionRole")
    for st in statements(t, role):
        for a in as_list(st.get("Action", [])):
            for r in as_list(st.get("Resource", [])):
                names = {"SessionRole"} if named is not None and r == named else ref_names(r) - {"AWS::Partition", "AWS::Region", "AWS::AccountId"}
                ids = {n.split(".")[0] for n in names}
                out |= {(a, n) for n in ids} if len(ids) == 1 else {(a, json.dumps(r, sort_keys=True))}
            if st.get("Effect") != "Allow" or "NotAction" in st or "NotResource" in st:
                out.add(("not-an-allow", json.dumps(st, sort_keys=True)))
    return out


def covers_tcp(rule, port):
    """Whether a security group rule covers tcp `port`."""
    if str(rule.get("IpProtocol")) == "-1":
        return True
    return str(rule.get("IpProtocol")) in ("tcp", "6") and int(rule.get("FromPort", -2)) <= port <= int(rule.get("ToPort", -2))


def check_task_api_service(t, task_env, api_env):
    """Gateway mode: the task API as an always-on ECS service in the private subnets (no public
    address) behind an internal Application Load Balancer whose HTTPS listener forwards POST
    /v1/internal/* alone; the load balancer admits the browser tasks alone, the service the load
    balancer alone; the service runs the control plane's binary's task-api command with the API
    function's configuration and the task API's three variables, as TaskApiRole, which allows
    exactly what the task API's code calls."""
    r = t["Resources"]
    missing = [n for n in TASK_API_RESOURCES if n not in r]
    if not check(not missing, f"gateway mode: the task API service's resources ({missing} missing)"):
        return
    poll = long_poll_seconds()

    # The service: always on, Fargate, private, behind the target group.
    params = t["Parameters"]
    count = params.get("TaskApiCount", {})
    check(count.get("Type") == "Number" and int(count.get("Default", 0)) >= 1 and int(count.get("MinValue", 0)) >= 1,
          f"TaskApiCount: a Number, at least 1 ({count})")
    svc = props(t, "TaskApiService")
    check(svc.get("DesiredCount") == {"Ref": "TaskApiCount"} and svc.get("LaunchType") == "FARGATE",
          "TaskApiService: Fargate, DesiredCount = TaskApiCount")
    vpc = svc.get("NetworkConfiguration", {}).get("AwsvpcConfiguration", {})
    check(vpc.get("AssignPublicIp") == "DISABLED" and vpc.get("Subnets") == {"Ref": "PrivateSubnetIds"}
          and vpc.get("SecurityGroups") == [{"Fn::GetAtt": ["TaskApiSecurityGroup", "GroupId"]}],
          f"TaskApiService: in PrivateSubnetIds, no public IP, in TaskApiSecurityGroup alone ({vpc})")
    check([(b.get("ContainerName"), b.get("ContainerPort"), b.get("TargetGroupArn")) for b in svc.get("LoadBalancers", [])]
          == [("task-api", 8080, {"Ref": "TaskApiTargetGroup"})], "TaskApiService: its task-api container's 8080 in TaskApiTargetGroup")
    cb = svc.get("DeploymentConfiguration", {}).get("DeploymentCircuitBreaker", {})
    check(cb.get("Enable") is True and cb.get("Rollback") is True, "TaskApiService: deployment circuit breaker with rollback")
    check(waits_for(t, "TaskApiService", "TaskApiListenerRule"),
          "TaskApiService: DependsOn TaskApiListenerRule (its target group is the load balancer's before the service registers)")

    # The load balancer: internal, in the private subnets, its own group.
    lb = props(t, "TaskApiLoadBalancer")
    check(lb.get("Type") == "application" and lb.get("Scheme") == "internal", "TaskApiLoadBalancer: an internal (Scheme internal) application load balancer")
    check(lb.get("Subnets") == {"Ref": "PrivateSubnetIds"}, "TaskApiLoadBalancer: in PrivateSubnetIds")
    check(lb.get("SecurityGroups") == [{"Fn::GetAtt": ["TaskApiLoadBalancerSecurityGroup", "GroupId"]}],
          "TaskApiLoadBalancer: in TaskApiLoadBalancerSecurityGroup alone")
    attrs = {a["Key"]: str(a["Value"]) for a in lb.get("LoadBalancerAttributes", [])}
    idle = int(attrs.get("idle_timeout.timeout_seconds", 60))
    check(idle >= poll, f"TaskApiLoadBalancer: idle timeout ({idle} s) above the longest long poll ({poll} s)")
    check(attrs.get("routing.http.drop_invalid_header_fields.enabled") == "true", "TaskApiLoadBalancer: drops invalid header fields")

    # The listener: HTTPS 443 with the connect host's certificate, 404 but for the one rule.
    ln = props(t, "TaskApiListener")
    connect = props(t, "ConnectListener")
    check(ln.get("LoadBalancerArn") == {"Ref": "TaskApiLoadBalancer"} and ln.get("Protocol") == "HTTPS" and ln.get("Port") == 443
          and ln.get("Certificates") == [{"CertificateArn": {"Ref": "ConnectCertificateArn"}}]
          and ln.get("SslPolicy") == connect.get("SslPolicy"),
          "TaskApiListener: HTTPS 443 on TaskApiLoadBalancer with ConnectCertificateArn and the connect listener's TLS policy")
    defaults = ln.get("DefaultActions", [])
    check(len(defaults) == 1 and defaults[0].get("Type") == "fixed-response"
          and str(defaults[0].get("FixedResponseConfig", {}).get("StatusCode")) == "404",
          f"TaskApiListener: anything but the task API's routes is a fixed 404 ({defaults})")
    rules = [(n, x["Properties"]) for n, x in resources(t, "AWS::ElasticLoadBalancingV2::ListenerRule").items()
             if "TaskApiListener" in ref_names(x["Properties"].get("ListenerArn"))]
    check([n for n, _ in rules] == ["TaskApiListenerRule"], f"TaskApiListener: one listener rule ({[n for n, _ in rules]})")
    for name, rule in rules:
        conds = {c.get("Field"): c for c in rule.get("Conditions", [])}
        paths = conds.get("path-pattern", {}).get("PathPatternConfig", {}).get("Values", conds.get("path-pattern", {}).get("Values"))
        methods = conds.get("http-request-method", {}).get("HttpRequestMethodConfig", {}).get("Values")
        check(len(rule.get("Conditions", [])) == 2 and paths == [TASK_API_PATTERN] and methods == ["POST"],
              f"{name}: forwards only POST {TASK_API_PATTERN} (path-pattern and http-request-method) ({rule.get('Conditions')})")
        check([(a.get("Type"), a.get("TargetGroupArn")) for a in rule.get("Actions", [])] == [("forward", {"Ref": "TaskApiTargetGroup"})],
              f"{name}: forwards to TaskApiTargetGroup alone")
        # The pattern as ELB matches it (* any run of characters): the contract's routes, no API route.
        for p in task_api_paths():
            check(fnmatch.fnmatchcase(p, TASK_API_PATTERN), f"{name}: forwards the task API's {p}")
        for p in ("/v1/sessions", "/health", "/v1/internal", "/v1/projects/internal/claims"):
            check(not fnmatch.fnmatchcase(p, TASK_API_PATTERN), f"{name}: does not forward {p}")
    tg = props(t, "TaskApiTargetGroup")
    tg_attrs = {a["Key"]: str(a["Value"]) for a in tg.get("TargetGroupAttributes", [])}
    dereg = int(tg_attrs.get("deregistration_delay.timeout_seconds", 300))
    check(tg.get("Protocol") == "HTTP" and tg.get("Port") == 8080 and tg.get("TargetType") == "ip"
          and tg.get("HealthCheckPath") == "/health", "TaskApiTargetGroup: HTTP 8080 to ip targets, health check /health")
    check(poll <= dereg <= 60, f"TaskApiTargetGroup: deregistration delay ({dereg} s) lets a long poll ({poll} s) finish, and no more than a minute")

    # Who may reach whom: the browser tasks the load balancer (tcp 443), the load balancer the
    # service (tcp 8080); never an address range.
    for group, port, source in (("TaskApiLoadBalancerSecurityGroup", 443, "TaskSecurityGroup"),
                                ("TaskApiSecurityGroup", 8080, "TaskApiLoadBalancerSecurityGroup")):
        rules_in = ingress(t, group)
        check(rules_in, f"{group}: has its ingress rule")
        for rule in rules_in:
            check(rule.get("IpProtocol") == "tcp" and rule.get("FromPort") == port and rule.get("ToPort") == port
                  and rule.get("SourceSecurityGroupId") == {"Fn::GetAtt": [source, "GroupId"]}
                  and not any(k in rule for k in ("CidrIp", "CidrIpv6", "SourcePrefixListId")),
                  f"{group}: admits tcp {port} from {source} alone ({rule})")
    egress = props(t, "TaskSecurityGroup").get("SecurityGroupEgress")
    check(egress is None or any(covers_tcp(e, 443) and (e.get("CidrIp") in ("0.0.0.0/0", {"Ref": "VpcCidr"})
                                                          or "TaskApiLoadBalancerSecurityGroup" in ref_names(e.get("DestinationSecurityGroupId")))
                                for e in egress),
          f"TaskSecurityGroup: its egress reaches the task API's load balancer on tcp 443 ({egress})")

    # The task definition: the control plane's binary, its task-api command, on 8080.
    td = props(t, "TaskApiTaskDefinition")
    check(td.get("NetworkMode") == "awsvpc" and td.get("RequiresCompatibilities") == ["FARGATE"]
          and int(td.get("Memory", 0)) in FARGATE.get(str(td.get("Cpu")), set()),
          f"TaskApiTaskDefinition: Fargate, awsvpc, a CPU/memory pair Fargate accepts ({td.get('Cpu')}/{td.get('Memory')})")
    check(td.get("TaskRoleArn") == {"Fn::GetAtt": ["TaskApiRole", "Arn"]}, "TaskApiTaskDefinition: task role TaskApiRole")
    c = container(t, "TaskApiTaskDefinition")
    check(c.get("Name") == "task-api" and c.get("Image") == {"Ref": "ImageUri"}, "TaskApiTaskDefinition: one container, task-api, of ImageUri")
    check(c.get("EntryPoint") == TASK_API_ENTRYPOINT and c.get("Command") == TASK_API_COMMAND,
          f"TaskApiTaskDefinition: runs the control plane's binary's task-api command ({c.get('EntryPoint')} {c.get('Command')})")
    cli = (ROOT / CONTROL_PLANE_BIN).read_text()
    if not re.search(r"\n\s*TaskApi\b", cli):
        note(f"{CONTROL_PLANE_BIN}: no task-api command yet (written at the same time)")
    if "/usr/local/bin/wallcrawler-control-plane" not in (ROOT / "Dockerfile").read_text():
        note("Dockerfile: the image does not hold /usr/local/bin/wallcrawler-control-plane yet (written at the same time)")
    env = container_env(c)
    port = str(env.get("TASK_API_LISTEN", "")).rpartition(":")[2]
    check(port == "8080" and [(p.get("ContainerPort"), p.get("Protocol", "tcp")) for p in c.get("PortMappings", [])] == [(8080, "tcp")],
          f"TaskApiTaskDefinition: TASK_API_LISTEN, the container port and the target group agree (8080; {env.get('TASK_API_LISTEN')})")
    check(any("127.0.0.1:8080/health" in str(x) for x in c.get("HealthCheck", {}).get("Command", [])),
          "TaskApiTaskDefinition: health check on 127.0.0.1:8080/health")
    stop = c.get("StopTimeout")
    check(isinstance(stop, int) and poll <= stop <= 120, f"TaskApiTaskDefinition: StopTimeout ({stop}) lets a long poll ({poll} s) finish, at most 120")
    read = env_names_read(*CONTROL_PLANE_AWS, CONTROL_PLANE_BIN, "crates/contract/src/task_env.rs")
    for name in env:
        check_read(name, read, f"TaskApiTaskDefinition: {name} is read by the control plane (crates/control-plane/src/aws/, its binary)")
    want = {k: v for k, v in api_env.items() if k not in TASK_API_NOT_VARS}
    for k, v in want.items():
        check(env.get(k) == v, f"TaskApiTaskDefinition: {k} as the API function's ({env.get(k)}; {v})")
    extra = sorted(set(env) - set(want) - TASK_API_OWN_VARS)
    check(not extra and not TASK_API_NOT_VARS & set(env), f"TaskApiTaskDefinition: nothing beyond the API function's variables and its own ({extra})")

    # The role: exactly what the task API's code calls, on exactly its resources.
    got = role_grants(t, "TaskApiRole")
    check(got == TASK_API_ROLE_GRANTS,
          f"TaskApiRole: exactly {sorted(TASK_API_ROLE_GRANTS)} (extra {sorted(got - TASK_API_ROLE_GRANTS)}, missing {sorted(TASK_API_ROLE_GRANTS - got)})")
    own = code_actions(*TASK_API_CODE)
    reached = code_actions(*TASK_API_CODE, *TASK_API_STORES)
    granted = {a for a, _ in got}
    check(own and own <= granted, f"TaskApiRole: allows every call of {TASK_API_CODE[0]} ({sorted(own - granted)})")
    check(granted <= reached, f"TaskApiRole: only calls the task API's code makes ({sorted(granted - reached)})")
    trust = props(t, "TaskApiRole").get("AssumeRolePolicyDocument", {}).get("Statement", [])
    check(len(trust) == 1 and trust[0].get("Principal") == {"Service": "ecs-tasks.amazonaws.com"},
          f"TaskApiRole: assumed by ECS tasks alone ({trust})")

    # The outputs.
    outs = t.get("Outputs", {})
    check(outs.get("TaskApiUrl", {}).get("Value") == task_env.get("TASK_API_URL"), "Outputs: TaskApiUrl = the tasks' TASK_API_URL")
    check(outs.get("TaskApiAddress", {}).get("Value") == {"Fn::GetAtt": ["TaskApiLoadBalancer", "DNSName"]},
          "Outputs: TaskApiAddress = the internal load balancer's DNS name")


def check_direct(t, task_env, api_env):
    r = t["Resources"]
    for name in r:
        check(not name.startswith(("Gateway", "Connect", "TaskApi")), f"{name}: not created in direct mode")
    vpc = props(t, "PoolService")["NetworkConfiguration"]["AwsvpcConfiguration"]
    check(vpc.get("AssignPublicIp") == "ENABLED" and "SubnetIds" in ref_names(vpc.get("Subnets")),
          "PoolService: public IP in SubnetIds")
    check(api_env.get("ECS_ASSIGN_PUBLIC_IP") == "ENABLED", "ApiFunction: ECS_ASSIGN_PUBLIC_IP ENABLED")
    check("CONNECT_BASE_URL" not in api_env, "ApiFunction: no CONNECT_BASE_URL (connectUrl is the task's address)")
    check(
        all("ClientCidr" in ref_names(x.get("CidrIp")) for x in ingress(t, "TaskSecurityGroup")),
        "TaskSecurityGroup: 9223 from ClientCidr",
    )
    check(task_env.get("PUBLIC_IP_REQUIRED") == "true", "TaskDefinition: PUBLIC_IP_REQUIRED=true (never announce a private IP)")
    check("TRUSTED_PROXY_NETWORKS" not in task_env, "TaskDefinition: no TRUSTED_PROXY_NETWORKS without a gateway")
    check(allowed(t, "TaskRole", "ec2:DescribeNetworkInterfaces", "*"), "TaskRole: allows ec2:DescribeNetworkInterfaces")


# --- Step 15: session events and the edge ----------------------------------------------------

# The processor's source and the names the template gives it (the function is written on the
# "events" branch at the same time: until its binary exists, its environment is a note).
SESSION_EVENTS_BIN = "crates/control-plane/src/bin/wallcrawler-session-events-lambda.rs"
SESSION_EVENTS_SOURCE = "wallcrawler.sessions"


def stream_readers(t):
    """The roles allowed to read records (dynamodb:GetRecords, by name or pattern) of a stream
    the sessions table's may be: its StreamArn, a pattern on its ARN, or any resource."""
    out = set()
    for role in resources(t, "AWS::IAM::Role"):
        for st in statements(t, role):
            reads = any(fnmatch.fnmatchcase("dynamodb:GetRecords", a) for a in as_list(st["Action"]))
            where = [json.dumps(r) for r in as_list(st.get("Resource"))]
            if st.get("Effect") == "Allow" and reads and any("SessionsTable" in w or "*" in w for w in where):
                out.add(role)
    return out


def check_session_events(t, needs):
    """Issue 28 item 1: the stream, its only reader, the topic, the mapping and its failures."""
    view = props(t, "SessionsTable").get("StreamSpecification", {}).get("StreamViewType")
    check(view in ("NEW_AND_OLD_IMAGES", "KEYS_ONLY"), f"SessionsTable: a stream for the session events ({view})")
    if view in ("NEW_AND_OLD_IMAGES", "NEW_IMAGE", "OLD_IMAGE"):
        # The images hold what the item holds: no token now (the API mints it when it answers),
        # but an item written by an older version may still hold one, so one role reads them.
        check(stream_readers(t) == {"SessionEventsFunctionRole"},
              f"SessionsTable: only SessionEventsFunctionRole reads its stream ({sorted(stream_readers(t))})")
    topic = props(t, "SessionEventsTopic")
    check(topic.get("TopicName") == {"Fn::Sub": "${NamePrefix}-session-ready"}, "SessionEventsTopic: named ${NamePrefix}-session-ready (the seeds')")
    check(bool(topic.get("KmsMasterKeyId")), "SessionEventsTopic: encrypted with a KMS key")
    fn = props(t, "SessionEventsFunction")
    check(fn.get("Runtime") == "provided.al2023" and fn.get("Handler") == "bootstrap", "SessionEventsFunction: provided.al2023, bootstrap")
    check(fn.get("Code", {}).get("S3Key") == {"Ref": "SessionEventsLambdaKey"}, "SessionEventsFunction: code at SessionEventsLambdaKey")
    env = fn.get("Environment", {}).get("Variables", {})
    check(env.get("SESSION_EVENTS_TOPIC_ARN") == {"Ref": "SessionEventsTopic"}, "SessionEventsFunction: SESSION_EVENTS_TOPIC_ARN = the topic")
    if (ROOT / SESSION_EVENTS_BIN).is_file():
        read = env_names_read(SESSION_EVENTS_BIN, *CONTROL_PLANE_AWS, "crates/control-plane/src/*.rs")
        for name in env:
            check_read(name, read, f"SessionEventsFunction: {name} is read by the processor")
    else:
        note(f"SessionEventsFunction: {SESSION_EVENTS_BIN} not yet (written on the events branch)")
    mappings = [p["Properties"] for p in resources(t, "AWS::Lambda::EventSourceMapping").values()]
    m = next((p for p in mappings if "SessionEventsFunction" in ref_names(p.get("FunctionName"))), {})
    check(m.get("EventSourceArn") == {"Fn::GetAtt": ["SessionsTable", "StreamArn"]}, "SessionEventsMapping: on the sessions table's stream")
    check(m.get("FunctionResponseTypes") == ["ReportBatchItemFailures"], "SessionEventsMapping: ReportBatchItemFailures")
    check(m.get("BisectBatchOnFunctionError") is True, "SessionEventsMapping: bisects a failing batch")
    check(0 <= int(m.get("MaximumRetryAttempts", -1)) <= 10, "SessionEventsMapping: bounded retries (MaximumRetryAttempts 0-10)")
    check(60 <= int(m.get("MaximumRecordAgeInSeconds", -1)) <= 21600, "SessionEventsMapping: bounded record age (MaximumRecordAgeInSeconds)")
    check(1 <= int(m.get("BatchSize", 0)) <= 100, "SessionEventsMapping: BatchSize 1-100")
    check(5 <= int(m.get("ParallelizationFactor", 1)) <= 10,
          f"SessionEventsMapping: ParallelizationFactor 5-10 (batches of a shard at once; a session's records stay in order, "
          f"one partition key) ({m.get('ParallelizationFactor', 1)})")
    check_stream_filter(m)
    dest = m.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
    check(dest == {"Fn::GetAtt": ["SessionEventsDeadLetterQueue", "Arn"]}, "SessionEventsMapping: on failure -> SessionEventsDeadLetterQueue")
    alarms = [a["Properties"] for a in resources(t, "AWS::CloudWatch::Alarm").values()]
    check(
        any("SessionEventsDeadLetterQueue" in ref_names(a.get("Dimensions")) for a in alarms),
        "SessionEventsDeadLetterQueue: an alarm on its messages",
    )
    needs("SessionEventsFunctionRole", "sqs:SendMessage", "SessionEventsDeadLetterQueue")
    needs("SessionEventsFunctionRole", "sns:Publish", "SessionEventsTopic")
    for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"):
        check(statement_on(t, "SessionEventsFunctionRole", action, {"Fn::GetAtt": ["SessionsTable", "StreamArn"]}),
              f"SessionEventsFunctionRole: {action} on the sessions stream")
    # ListStreams names streams and reads none; IAM takes no resource for it.
    check(statement_on(t, "SessionEventsFunctionRole", "dynamodb:ListStreams", "*"), "SessionEventsFunctionRole: dynamodb:ListStreams")
    check(
        statement_on(t, "SessionEventsFunctionRole", "events:PutEvents",
                     {"Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/default"}),
        "SessionEventsFunctionRole: events:PutEvents on the default bus",
    )
    granted = actions(t, "SessionEventsFunctionRole") - {"logs:CreateLogStream", "logs:PutLogEvents"}
    check(granted == {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams",
                      "sqs:SendMessage", "sns:Publish", "events:PutEvents"},
          f"SessionEventsFunctionRole: nothing beyond its work ({sorted(granted)})")
    outs = t.get("Outputs", {})
    check(outs.get("SessionEventsTopicArn", {}).get("Value") == {"Ref": "SessionEventsTopic"}, "Outputs: SessionEventsTopicArn")
    check(outs.get("SessionEventsSource", {}).get("Value") == SESSION_EVENTS_SOURCE, f"Outputs: SessionEventsSource = {SESSION_EVENTS_SOURCE}")
    if "wallcrawler-session-events-lambda" not in (ROOT / "scripts/lambda.sh").read_text():
        note("scripts/lambda.sh: wallcrawler-session-events-lambda not yet packaged (events branch)")
    check('"SessionEventsLambdaKey"' in (ROOT / "deploy/moto_stack.py").read_text(), "deploy/moto_stack.py: uploads the SessionEventsLambdaKey zip")


# --- Issue 40 item 7: the stream mapping's filter -----------------------------------------------

def contract_statuses():
    """{internalStatus string: whether a session may still become ready in it} from the
    contract (crates/contract/src/session.rs: InternalStatus::as_str and may_become_ready)."""
    src = (ROOT / "crates/contract/src/session.rs").read_text()
    src = src[src.index("impl InternalStatus {"):src.index("impl SdkStatus {")]
    names = dict(re.findall(r"Self::([A-Za-z]+) => \"([A-Z_]+)\"", src))
    body = re.search(r"fn may_become_ready\(self\) -> bool \{(.*?)\n    \}", src, re.S).group(1)
    pending = {names[v] for v in re.findall(r"Self::([A-Za-z]+)", body)}
    return {s: s in pending for s in names.values()}


def pattern_matches(pattern, event):
    """Whether a Lambda event filter `pattern` (the subset the template uses: nested objects,
    lists of exact values and {"prefix": ...}) matches `event`. Raises ValueError on anything
    else, so the check cannot pass on a pattern it does not understand."""
    for k, want in pattern.items():
        if k not in event:
            return False
        got = event[k]
        if isinstance(want, dict):
            if not isinstance(got, dict) or not pattern_matches(want, got):
                return False
        elif isinstance(want, list):
            def one(w):
                if isinstance(w, dict):
                    if list(w) != ["prefix"]:
                        raise ValueError(f"filter operator {w} not understood here")
                    return isinstance(got, str) and got.startswith(w["prefix"])
                return got == w
            if not any(one(w) for w in want):
                return False
        else:
            raise ValueError(f"filter value {want!r} is not a list or an object")
    return True


def stream_record(name, key, status=None):
    """A DynamoDB stream record as Lambda's filter sees it: eventName, Keys, NewImage."""
    d = {"Keys": {"sessionId": {"S": key}}}
    if name != "REMOVE":
        d["NewImage"] = {"sessionId": {"S": key}, **({"internalStatus": {"S": status}} if status else {})}
    if name != "INSERT":
        d["OldImage"] = {"sessionId": {"S": key}, "internalStatus": {"S": "STARTING"}}
    return {"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": d}


def check_stream_filter(m):
    """The mapping passes every record that can make an event (events_of: a session item's
    INSERT; a MODIFY whose new internalStatus a session reaches only at or after READY) and
    none of: the usage items (usage#<projectId>), REMOVEs, a session's MODIFYs while it may
    still become ready (the claim's take, the owner's lease: owner, ownerUntil)."""
    filters = m.get("FilterCriteria", {}).get("Filters", [])
    if not check(filters, "SessionEventsMapping: FilterCriteria (usage items and lease-only changes do not invoke it)"):
        return
    try:
        patterns = [json.loads(f["Pattern"]) for f in filters]
    except (KeyError, TypeError, ValueError) as e:
        check(False, f"SessionEventsMapping: each filter a JSON Pattern ({e})")
        return

    def passes(record):
        try:
            return any(pattern_matches(p, record) for p in patterns)
        except ValueError as e:
            check(False, f"SessionEventsMapping: {e}")
            return None

    statuses = contract_statuses()
    check(statuses and any(statuses.values()) and not all(statuses.values()),
          f"crates/contract/src/session.rs: InternalStatus names and may_become_ready read ({statuses})")
    must = [("INSERT", "sess_1", "CREATING")] + [("MODIFY", "sess_1", s) for s, pending in statuses.items() if not pending]
    never = [("INSERT", "usage#proj_1", None), ("MODIFY", "usage#proj_1", None), ("REMOVE", "sess_1", None),
             ("REMOVE", "usage#proj_1", None), ("MODIFY", "sess_1", None)]
    never += [("MODIFY", "sess_1", s) for s, pending in statuses.items() if pending]
    never += [("MODIFY", "usage#proj_1", s) for s in statuses]
    for name, key, status in must:
        check(passes(stream_record(name, key, status)) is not False,
              f"SessionEventsMapping: its filter passes {name} of {key}" + (f" to {status}" if status else "") + " (it can make an event)")
    for name, key, status in never:
        check(passes(stream_record(name, key, status)) is not True,
              f"SessionEventsMapping: its filter drops {name} of {key}" + (f" to {status}" if status else "") + " (it makes no event)")


def rust_const(path, name, scope):
    """The value of `const NAME: usize = <expr>;` in the file `path`, its terms evaluated:
    numbers, `*`, `+`, and constants (of `path`, else of the files `scope`)."""
    text = (ROOT / path).read_text()
    found = re.search(rf"const {name}: usize = ([^;]+);", text)
    if not found:
        path = next(p for p in scope if re.search(rf"const {name}: usize", (ROOT / p).read_text()))
        return rust_const(path, name, scope)
    expr = re.sub(r"\b([A-Z][A-Z0-9_]+)\b", lambda m: str(rust_const(path, m.group(1), scope)), found.group(1))
    if not check(re.fullmatch(r"[0-9 *+]+", expr), f"{path}: {name} is a sum of products ({expr})"):
        return 0
    return eval(expr)  # noqa: S307 (digits, spaces, * and + only: checked above)


def api_body_limit():
    """The API's largest request body: the larger of its two raised body limits (extensions and
    session uploads; every other route keeps axum's 2 MB default)."""
    raised = set(re.findall(r"DefaultBodyLimit::max\(([^)]*)\)", (ROOT / "crates/control-plane/src/router.rs").read_text()))
    check(raised == {"u::MAX_BODY_BYTES", "x::MAX_BODY_BYTES"},
          f"crates/control-plane/src/router.rs: raises only the uploads' and the extensions' body limits ({sorted(raised)})")
    return max(rust_const(path, "MAX_BODY_BYTES", BODY_LIMIT_SOURCES) for path in BODY_LIMIT_SOURCES[1:])


def above_regex(n):
    """A regular expression matching the decimal numbers above n (leading zeros allowed)."""
    s, alts = str(n), [f"[1-9][0-9]{{{len(str(n))},}}"]
    for i, ch in enumerate(s):
        if ch != "9":
            lo, rest = int(ch) + 1, len(s) - i - 1
            alts.append(s[:i] + (f"[{lo}-9]" if lo < 9 else "9") + (f"[0-9]{{{rest}}}" if rest else ""))
    return "^0*(" + "|".join(alts) + ")$"


BODY_LIMIT_SOURCES = ("crates/contract/src/extension_archive.rs", "crates/control-plane/src/extensions/mod.rs",
                      "crates/control-plane/src/uploads.rs")


def check_edge(t, cloudfront, gateway=False):
    """Issue 28 item 2: the web ACL on the stage, its rules' numbers as parameters."""
    acl = props(t, "ApiWebAcl")
    check(acl.get("Scope") == "REGIONAL" and acl.get("DefaultAction") == {"Allow": {}}, "ApiWebAcl: REGIONAL, allows by default")
    rules = {r["Name"]: r for r in acl.get("Rules", [])}
    check(len({r["Priority"] for r in rules.values()}) == len(rules), "ApiWebAcl: distinct priorities")
    rate = {n: r["Statement"]["RateBasedStatement"] for n, r in rules.items() if "RateBasedStatement" in r["Statement"]}
    for n, r in rate.items():
        check(isinstance(r.get("Limit"), dict) and r["Limit"].get("Ref") in t["Parameters"], f"ApiWebAcl: {n}'s limit is a parameter")
        check(rules[n].get("Action") == {"Block": {}}, f"ApiWebAcl: {n} blocks")
    check_edge_sizes(t)
    check_task_api_excluded(t, rules, cloudfront, gateway)
    check_no_sampled_headers(t, acl)
    auth = (ROOT / "crates/control-plane/src/auth.rs").read_text()
    for header in ("x-wc-api-key", "x-bb-api-key"):
        check(f'"{header}"' in auth, f"crates/control-plane/src/auth.rs: reads {header}")
        check(
            any(r.get("CustomKeys") == [{"Header": {"Name": header, "TextTransformations": [{"Priority": 0, "Type": "NONE"}]}}]
                for r in rate.values()),
            f"ApiWebAcl: a rate-based rule per {header} value",
        )
    managed = {r["Statement"]["ManagedRuleGroupStatement"]["Name"]: r for r in rules.values() if "ManagedRuleGroupStatement" in r["Statement"]}
    for group in ("AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet"):
        check(group in managed and managed[group].get("OverrideAction") == {"None": {}}, f"ApiWebAcl: {group}, its own actions")
    overrides = managed.get("AWSManagedRulesCommonRuleSet", {}).get("Statement", {}).get("ManagedRuleGroupStatement", {}).get("RuleActionOverrides", [])
    check({"Name": "SizeRestrictions_BODY", "ActionToUse": {"Count": {}}} in overrides,
          "ApiWebAcl: the common rule set's 8 KB body limit only counts (uploads and extensions are larger)")
    limit = api_body_limit()
    regex = [r["Statement"]["RegexMatchStatement"] for r in rules.values() if "RegexMatchStatement" in r["Statement"]]
    check(
        any(x.get("FieldToMatch") == {"SingleHeader": {"Name": "content-length"}} and x.get("RegexString") == above_regex(limit)
            for x in regex),
        f"ApiWebAcl: blocks a Content-Length above the API's largest body ({limit}: {above_regex(limit)})",
    )
    assoc = [p["Properties"] for p in resources(t, "AWS::WAFv2::WebACLAssociation").values()]
    check(
        any(a.get("WebACLArn") == {"Fn::GetAtt": ["ApiWebAcl", "Arn"]}
            and a.get("ResourceArn") == {"Fn::Sub": "arn:${AWS::Partition}:apigateway:${AWS::Region}::/restapis/${RestApi}/stages/${ApiStage}"}
            for a in assoc),
        "ApiWebAclAssociation: the web ACL on the API stage",
    )
    if not cloudfront:
        check(not resources(t, "AWS::CloudFront::Distribution"), "EdgeCloudFront false: no distribution")
        return
    (d,) = [p["Properties"]["DistributionConfig"] for p in resources(t, "AWS::CloudFront::Distribution").values()] or [{}]
    (origin,) = d.get("Origins", [{}])
    check(origin.get("DomainName") == {"Fn::Sub": "${RestApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}"},
          "ApiDistribution: the API's execute-api origin")
    check(origin.get("CustomOriginConfig", {}).get("OriginProtocolPolicy") == "https-only", "ApiDistribution: HTTPS to the origin")
    b = d.get("DefaultCacheBehavior", {})
    check(b.get("CachePolicyId") == "4135ea2d-6df8-44a3-9df3-4b5a84be39ad", "ApiDistribution: Managed-CachingDisabled")
    check(b.get("OriginRequestPolicyId") == "b689b0a8-53d0-40ab-baf2-68738e2966ac",
          "ApiDistribution: Managed-AllViewerExceptHostHeader (the API key headers forwarded, not Host)")
    check(set(b.get("AllowedMethods", [])) == {"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"}, "ApiDistribution: every method")
    check("ConnectLoadBalancer" not in ref_names(d), "ApiDistribution: not in front of the connect host")
    readme = (ROOT / "deploy/README.md").read_text()
    check("origin idle" in readme or "idle limit" in readme, "deploy/README.md: why the connect host is not behind CloudFront")


# --- Issue 40 item 6: the edge's defaults, the task API left out, the address CloudFront saw ------

# The requests-per-second a single API key (and a single address) may send by default.
EDGE_MIN_RATE = 20
# Stand-ins for what CloudFormation resolves when the stack runs: the stack id's last part (the
# origin header's value), as a template spells it.
STACK_ID_PART = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
STACK_ID_PART_VALUE = "0b5e6f9c-1d2a-4c3b-9e8f-7a6b5c4d3e2f"


def check_edge_sizes(t):
    """Item 6: one API key may send at least EDGE_MIN_RATE requests per second by default, and
    one address as much as one key (a client on one address is not stopped before its key)."""
    params = t["Parameters"]
    key, ip = int(params["WafRatePerApiKey"]["Default"]), int(params["WafRatePerIp"]["Default"])
    window = int(params["WafRateWindowSeconds"]["Default"])
    check(key >= EDGE_MIN_RATE * window,
          f"WafRatePerApiKey: default at least {EDGE_MIN_RATE} requests per second ({EDGE_MIN_RATE * window} per {window} s; has {key})")
    check(ip >= key, f"WafRatePerIp: default at least WafRatePerApiKey's ({ip} < {key})")


def waf_string(v, params):
    """A string of a WAF statement as CloudFormation resolves it: a parameter's default in a
    Fn::Sub or Ref, the stack id's last part as STACK_ID_PART_VALUE."""
    if isinstance(v, str):
        return v
    if v == STACK_ID_PART:
        return STACK_ID_PART_VALUE
    if isinstance(v, dict) and list(v) == ["Ref"] and v["Ref"] in params:
        return str(params[v["Ref"]]["Default"])
    if isinstance(v, dict) and list(v) == ["Fn::Sub"] and isinstance(v["Fn::Sub"], str):
        def sub(m):
            if m.group(1) not in params or "Default" not in params[m.group(1)]:
                raise ValueError(f"cannot resolve ${{{m.group(1)}}}")
            return str(params[m.group(1)]["Default"])
        return re.sub(r"\$\{([^}!]+)\}", sub, v["Fn::Sub"])
    raise ValueError(f"cannot resolve {json.dumps(v)}")


def waf_matches(stmt, req, params):
    """Whether the WAF statement `stmt` matches `req` ({"method", "path", "headers"}: lower-case
    names). Only what the template uses is modelled (And, Or, Not, byte and regex matches of
    the method, the URI path and a single header, no text transformation); anything else
    raises ValueError, so no check passes on a statement it does not understand."""
    (kind, x), = stmt.items()
    if kind == "AndStatement":
        return all(waf_matches(s, req, params) for s in x["Statements"])
    if kind == "OrStatement":
        return any(waf_matches(s, req, params) for s in x["Statements"])
    if kind == "NotStatement":
        return not waf_matches(x["Statement"], req, params)
    if kind not in ("ByteMatchStatement", "RegexMatchStatement"):
        raise ValueError(f"{kind} is not modelled")
    if x.get("TextTransformations") != [{"Priority": 0, "Type": "NONE"}]:
        raise ValueError(f"text transformations {x.get('TextTransformations')} are not modelled")
    (field, spec), = x["FieldToMatch"].items()
    if field == "Method":
        value = req["method"]
    elif field == "UriPath":
        value = req["path"]
    elif field == "SingleHeader":
        value = req["headers"].get(spec["Name"].lower())
    else:
        raise ValueError(f"field {field} is not modelled")
    if value is None:
        return False
    if kind == "RegexMatchStatement":
        return re.search(waf_string(x["RegexString"], params), value) is not None
    want, how = waf_string(x["SearchString"], params), x["PositionalConstraint"]
    ops = {"EXACTLY": value == want, "STARTS_WITH": value.startswith(want), "ENDS_WITH": value.endswith(want),
           "CONTAINS": want in value}
    if how not in ops:
        raise ValueError(f"positional constraint {how} is not modelled")
    return ops[how]


def in_scope(statement, req, params):
    """Whether a rule whose scope-down statement is `statement` (None: no scope-down) sees `req`."""
    return statement is None or waf_matches(statement, req, params)


def task_api_paths():
    """The task API's routes (the contract's `*_PATH` constants under /v1/internal/)."""
    src = (ROOT / "crates/contract/src/task_api.rs").read_text()
    return re.findall(r'pub const [A-Z_]+_PATH: &str = "(/v1/internal/[^"]+)";', src)


def edge_requests(stage):
    """(task API requests, customer requests) as WAF sees them on the stage: a task calls the
    execute-api URL with the stage (TASK_API_URL), a custom domain has no stage in its paths.
    The customer ones include paths that only look like the task API's."""
    identity = re.search(r'IDENTITY_HEADER: &str = "([^"]+)"', (ROOT / "crates/contract/src/task_api.rs").read_text()).group(1)
    tasks = [{"method": "POST", "path": prefix + p, "headers": {identity: "x", "user-agent": "wallcrawler"}}
             for p in task_api_paths() for prefix in (f"/{stage}", "")]
    paths = ["/v1/sessions", "/v1/sessions/sess_1", "/v1/internal/../sessions", "/v1/internal/%2e%2e/sessions",
             "/v1/internal//claims", "/v1/internal/claims/../../sessions", "/v1/sessions/v1/internal/claims", "/v1/internal/claims/x/.."]
    customers = [{"method": "POST", "path": prefix + p, "headers": {"x-bb-api-key": "bb_1"}} for p in paths for prefix in (f"/{stage}", "")]
    customers += [{"method": m, "path": f"/{stage}{p}", "headers": {"x-bb-api-key": "bb_1"}}
                  for p in task_api_paths() for m in ("GET", "PUT", "DELETE")]
    return tasks, customers


def address_rules(rules):
    """{name: RateBasedStatement} of the rate-based rules keyed on an address."""
    out = {}
    for n, r in rules.items():
        rb = r["Statement"].get("RateBasedStatement")
        if rb and (rb.get("AggregateKeyType") in ("IP", "FORWARDED_IP")
                   or any({"IP", "ForwardedIP"} & set(k) for k in rb.get("CustomKeys", []))):
            out[n] = rb
    return out


def check_task_api_excluded(t, rules, cloudfront, gateway=False):
    """Item 6: direct mode: no rule keyed on an address counts the task API's requests, and no
    managed rule group sees them (all the tasks share the NAT gateway's addresses); every
    customer request, paths made to look like the task API's among them, is still counted per
    address and seen by every managed group. Gateway mode (Step 19 item 2): the task API is not
    on the stage, so nothing is left out: a request on its paths is a customer's like any. No rule trusts a client's X-Forwarded-For: an address rule keys on the
    peer, or (behind CloudFront) on the header the distribution writes, only for requests that
    carry its origin header."""
    params = t["Parameters"]
    stage = params["StageName"]["Default"]
    tasks, customers = edge_requests(stage)
    if gateway:
        tasks, customers = [], customers + tasks
    check(len(task_api_paths()) >= 2, f"crates/contract/src/task_api.rs: the task API's routes found ({task_api_paths()})")
    by_addr = address_rules(rules)
    check(by_addr, "ApiWebAcl: a rate-based rule per client address")
    viewer_header, origin = None, None
    if cloudfront:
        d = props(t, "ApiDistribution").get("DistributionConfig", {})
        (o,) = d.get("Origins", [{}])
        origin = {h["HeaderName"].lower(): h["HeaderValue"] for h in o.get("OriginCustomHeaders", [])}
        fns = [a for a in d.get("DefaultCacheBehavior", {}).get("FunctionAssociations", []) if a.get("EventType") == "viewer-request"]
        code = ""
        if check(len(fns) == 1 and isinstance(fns[0].get("FunctionARN"), dict) and "Fn::GetAtt" in fns[0]["FunctionARN"],
                 "ApiDistribution: one viewer-request function (it writes the viewer's address)"):
            code = props(t, fns[0]["FunctionARN"]["Fn::GetAtt"][0]).get("FunctionCode", "")
        m = re.search(r"request\.headers\[['\"]([a-z0-9-]+)['\"]\]\s*=\s*\{\s*value:\s*event\.viewer\.ip\s*\}", code)
        viewer_header = m.group(1) if m else None
        check(viewer_header not in (None, "x-forwarded-for"),
              "ApiDistribution: its viewer-request function sets a header of its own to event.viewer.ip (replacing the client's)")
    for n, rb in by_addr.items():
        fwd = rb.get("ForwardedIPConfig", {}).get("HeaderName", "").lower()
        kind = rb.get("AggregateKeyType")
        check(kind in ("IP", "FORWARDED_IP"), f"ApiWebAcl: {n} keyed on IP or FORWARDED_IP alone ({kind})")
        check(fwd != "x-forwarded-for", f"ApiWebAcl: {n} does not trust X-Forwarded-For (a client writes its first address)")
        if kind == "FORWARDED_IP":
            check(cloudfront and fwd == viewer_header,
                  f"ApiWebAcl: {n} keyed on a forwarded address only behind CloudFront, on the header its function writes ({fwd})")
    try:
        # The task API's requests: never counted per address, whatever they carry.
        for n, rb in by_addr.items():
            for req in tasks:
                for extra in ([{}] + ([{viewer_header: "192.0.2.1", **{h: v for h, v in (origin or {}).items()}}] if cloudfront else [])):
                    r = {**req, "headers": {**req["headers"], **{h: waf_string(v, params) for h, v in extra.items()}}}
                    check(not in_scope(rb.get("ScopeDownStatement"), r, params),
                          f"ApiWebAcl: {n} does not count the task API's {r['method']} {r['path']}")
        # Customer requests: counted per address, by the peer's when they come directly, by the
        # viewer's (and only then) when they carry the distribution's origin header.
        def counted(req):
            return sorted(n for n, rb in by_addr.items() if in_scope(rb.get("ScopeDownStatement"), req, params))
        for req in customers:
            direct = {**req, "headers": {**req["headers"], "x-forwarded-for": "198.51.100.7"}}
            if viewer_header:
                direct["headers"][viewer_header] = "198.51.100.8"
            got = counted(direct)
            check(len(got) == 1 and by_addr[got[0]].get("AggregateKeyType") == "IP",
                  f"ApiWebAcl: a direct {req['method']} {req['path']} is counted once, by its peer's address ({got})")
            if cloudfront:
                cf = {**req, "headers": {**req["headers"], viewer_header or "-": "203.0.113.9",
                                         **{h: waf_string(v, params) for h, v in (origin or {}).items()}}}
                got = counted(cf)
                check(len(got) == 1 and by_addr[got[0]].get("AggregateKeyType") == "FORWARDED_IP",
                      f"ApiWebAcl: {req['method']} {req['path']} through CloudFront is counted once, by the viewer's address ({got})")
        # The managed groups: none sees a task API request; each sees every customer one.
        for n, r in rules.items():
            g = r["Statement"].get("ManagedRuleGroupStatement")
            if not g:
                continue
            scope = g.get("ScopeDownStatement")
            for req in tasks:
                check(not in_scope(scope, req, params), f"ApiWebAcl: {n} ({g['Name']}) does not see the task API's {req['method']} {req['path']}")
            for req in customers:
                check(in_scope(scope, req, params), f"ApiWebAcl: {n} ({g['Name']}) sees {req['method']} {req['path']}")
    except (ValueError, KeyError, TypeError) as e:
        check(False, f"ApiWebAcl: a scope-down statement check_template cannot evaluate ({e})")


# The request headers that carry a credential: both API key headers (crates/control-plane/src/
# auth.rs) and the task identity (the contract's IDENTITY_HEADER).
def secret_headers():
    ident = re.search(r'IDENTITY_HEADER: &str = "([^"]+)"', (ROOT / "crates/contract/src/task_api.rs").read_text()).group(1)
    return ["x-wc-api-key", "x-bb-api-key", ident]


def check_no_sampled_headers(t, acl):
    """Item 4: WAF keeps no credential header. Sampled requests store every header as sent, with
    no redaction: off on the web ACL and every rule. A WAF logging configuration, if the
    template has one, redacts the API key headers and the task identity."""
    vis = [("ApiWebAcl", acl.get("VisibilityConfig", {}))] + [(r["Name"], r.get("VisibilityConfig", {})) for r in acl.get("Rules", [])]
    for name, v in vis:
        check(v.get("SampledRequestsEnabled") in (False, "false"),
              f"ApiWebAcl: {name} keeps no sampled requests (they store {', '.join(secret_headers())} unredacted)")
    for name, res in resources(t, "AWS::WAFv2::LoggingConfiguration").items():
        redacted = {f.get("SingleHeader", {}).get("Name", "").lower() for f in res["Properties"].get("RedactedFields", [])}
        for h in secret_headers():
            check(h in redacted, f"{name}: redacts {h}")
    readme = (ROOT / "deploy/README.md").read_text()
    if not resources(t, "AWS::WAFv2::LoggingConfiguration"):
        check("RedactedFields" in readme and "SampledRequestsEnabled" in readme,
              "deploy/README.md: says the web ACL logs nothing and keeps no samples, and how to log with RedactedFields")


# --- Step 19: names that fit, and the deploy commands' capabilities ----------------------------

# The name properties of each resource type (dotted path, list indices dropped) and their
# length limits (AWS's documentation of each API; cfn-lint's schemas where they give one). A
# name built from NamePrefix in a property not listed here fails: add its limit first. None: no
# limit documented (API Gateway's quotas name none for a REST API's name).
NAME_LIMITS = {
    "AWS::DynamoDB::Table": {"TableName": 255},
    "AWS::SQS::Queue": {"QueueName": 80},
    "AWS::ECS::Cluster": {"ClusterName": 255},
    "AWS::ECS::Service": {"ServiceName": 255},
    "AWS::ECS::TaskDefinition": {"Family": 255},
    "AWS::Logs::LogGroup": {"LogGroupName": 512},
    "AWS::IAM::Role": {"RoleName": 64, "Policies.PolicyName": 128},
    "AWS::IAM::ManagedPolicy": {"ManagedPolicyName": 128},
    "AWS::IAM::InstanceProfile": {"InstanceProfileName": 128},
    "AWS::IAM::User": {"UserName": 64},
    "AWS::IAM::Group": {"GroupName": 128},
    "AWS::ApplicationAutoScaling::ScalingPolicy": {"PolicyName": 256},
    "AWS::SNS::Topic": {"TopicName": 256},
    "AWS::ElasticLoadBalancingV2::LoadBalancer": {"Name": 32},
    "AWS::ElasticLoadBalancingV2::TargetGroup": {"Name": 32},
    "AWS::Lambda::Function": {"FunctionName": 64},
    "AWS::ApiGateway::RestApi": {"Name": None},
    "AWS::WAFv2::WebACL": {"Name": 128, "VisibilityConfig.MetricName": 128, "Rules.Name": 128,
                           "Rules.VisibilityConfig.MetricName": 128},
    "AWS::CloudFront::Distribution": {"DistributionConfig.Comment": 128},
    "AWS::CloudFront::Function": {"Name": 64},
    "AWS::CloudWatch::Alarm": {"AlarmName": 255},
    "AWS::Events::Rule": {"Name": 64},
    "AWS::S3::Bucket": {"BucketName": 63},
    "AWS::SecretsManager::Secret": {"Name": 512},
}

# The longest value of each pseudo parameter a name may hold: the region us-isof-south-1, the
# partition aws-us-gov, the URL suffix amazonaws.com.cn (botocore's endpoints.json, 1.43).
PSEUDO_MAX = {"AWS::Region": 15, "AWS::AccountId": 12, "AWS::Partition": 10, "AWS::URLSuffix": 16,
              "AWS::StackName": 128}


def longest(v, params, subs=None):
    """The longest `v` can be: strings as they are, a parameter at its MaxLength, a pseudo
    parameter at PSEUDO_MAX; None if unbounded or not understood."""
    subs = subs or {}
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return len(str(v))
    if not isinstance(v, dict) or len(v) != 1:
        return None
    (k, x), = v.items()
    if k == "Ref":
        if x == "AWS::NoValue":
            return 0
        if x in PSEUDO_MAX:
            return PSEUDO_MAX[x]
        m = params.get(x, {}).get("MaxLength")
        return int(m) if m is not None else None
    if k == "Fn::Sub":
        text, subs = (x[0], {**subs, **x[1]}) if isinstance(x, list) else (x, subs)
        total = 0
        for lit, var in re.findall(r"\$\{!([^}]*)\}|\$\{([^}]+)\}", text):
            n = len("${" + lit + "}") if lit else longest(subs[var] if var in subs else {"Ref": var}, params)
            if n is None:
                return None
            total += n
        return total + len(re.sub(r"\$\{[^}]*\}", "", text))
    if k == "Fn::Join" and isinstance(x, list) and isinstance(x[1], list):
        parts = [longest(p, params, subs) for p in x[1]]
        return None if None in parts else sum(parts) + len(x[0]) * max(len(parts) - 1, 0)
    if k == "Fn::If":
        parts = [longest(p, params, subs) for p in x[1:]]
        return None if None in parts else max(parts)
    return None


def name_property(key):
    return key.endswith("Name") or key == "Family"


def prefixed_names(rtype, node, path=()):
    """(dotted path, value) of every property of the resource (`node`: its Properties) that is a
    name or has a limit in NAME_LIMITS and is built from NamePrefix; Fn::If branches both."""
    if isinstance(node, list):
        for x in node:
            yield from prefixed_names(rtype, x, path)
    elif isinstance(node, dict):
        for k, v in node.items():
            intrinsic = k == "Ref" or k.startswith("Fn::")
            p = path if intrinsic else path + (k,)
            if not intrinsic and "NamePrefix" in json.dumps(v) and (
                name_property(k) or ".".join(p) in NAME_LIMITS.get(rtype, {})
            ):
                yield ".".join(p), v
            elif not (k == "Ref" or k == "Fn::Sub"):
                yield from prefixed_names(rtype, v, p)


def check_name_lengths(raw):
    """Every name built from NamePrefix fits its resource type's limit with NamePrefix at its
    MaxLength (and every pseudo parameter at its longest)."""
    params = raw["Parameters"]
    if not check("MaxLength" in params["NamePrefix"], "NamePrefix: a MaxLength (the names built from it have limits)"):
        return
    at = params["NamePrefix"]["MaxLength"]
    for name, res in raw["Resources"].items():
        rtype = res["Type"]
        for path, v in prefixed_names(rtype, res.get("Properties", {})):
            limits = NAME_LIMITS.get(rtype, {})
            if not check(path in limits, f"{name}: {rtype} {path} is built from NamePrefix and NAME_LIMITS has no limit for it"):
                continue
            n = longest(v, params)
            if not check(n is not None, f"{name}: {path} cannot be bounded ({json.dumps(v)})"):
                continue
            limit = limits[path]
            check(limit is None or n <= limit,
                  f"{name}: {path} {json.dumps(v)} is {n} characters with NamePrefix at its MaxLength {at}, over {rtype}'s {limit}")


# IAM resources whose explicit name needs CAPABILITY_NAMED_IAM at deploy time.
NAMED_IAM = {"AWS::IAM::Role": "RoleName", "AWS::IAM::ManagedPolicy": "ManagedPolicyName", "AWS::IAM::User": "UserName",
             "AWS::IAM::Group": "GroupName", "AWS::IAM::InstanceProfile": "InstanceProfileName"}
# Where deploy commands may be documented: every Markdown file of the repository but these
# directories' (dependencies, build output, virtual environments).
NOT_DOCS = {"node_modules", "target", "dist"}
DEPLOY_COMMAND = re.compile(r"\b(aws\s+cloudformation\s+(?:deploy|create-stack|update-stack|create-change-set)|sam\s+deploy|cdk\s+deploy)\b")


def doc_commands(text, command=DEPLOY_COMMAND):
    """(line, command) of every `command` (a deploy command by default) in the Markdown `text`
    that has arguments: in a fenced block up to the end of its line (backslash continuations
    joined) or a shell comment or separator, in an inline code span up to its closing backtick
    (which may be lines later). A bare mention in prose (`aws cloudformation deploy` alone) is
    no command."""
    found = []
    fences = list(re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S))
    for f in fences:
        line = text.count("\n", 0, f.start(1)) + 1
        for logical in re.split(r"(?<!\\)\n", f.group(1)):
            joined = logical.replace("\\\n", " ")
            for m in command.finditer(joined):
                found.append((line, re.split(r"\s#|&&|;|\|", joined[m.start():])[0]))
            line += logical.count("\n") + 1
    prose = text
    for f in fences:  # blanked, its line breaks kept
        prose = prose[: f.start()] + re.sub(r"[^\n]", " ", f.group(0)) + prose[f.end():]
    for span in re.finditer(r"`([^`]+)`", prose):
        for m in command.finditer(span.group(1)):
            found.append((text.count("\n", 0, span.start()) + 1, span.group(1)[m.start():]))
    out = [(line, " ".join(cmd.split())) for line, cmd in found]
    return [(line, cmd) for line, cmd in out if not command.fullmatch(cmd)]


def check_deploy_commands(raw, docs):
    """Every documented deploy command (`docs`: {path: Markdown text}) passes the capability
    the template needs: CAPABILITY_NAMED_IAM when it names an IAM resource, else at least
    CAPABILITY_IAM when it has one."""
    named = sorted(n for n, r in raw["Resources"].items() if NAMED_IAM.get(r["Type"]) in r.get("Properties", {}))
    iam = any(r["Type"].startswith("AWS::IAM::") for r in raw["Resources"].values())
    need = "CAPABILITY_NAMED_IAM" if named else "CAPABILITY_IAM" if iam else None
    found = 0
    for path, text in sorted(docs.items()):
        for line, cmd in doc_commands(text):
            found += 1
            if cmd.startswith("cdk"):
                check(False, f"{path}:{line}: {cmd.split(' --')[0]}: the template is no CDK app; deploy it with aws cloudformation deploy")
                continue
            caps = re.search(r"--capabilities\s+((?:CAPABILITY_[A-Z_]+[\s,]*)+)", cmd)
            have = set(re.findall(r"CAPABILITY_[A-Z_]+", caps.group(1))) if caps else set()
            ok = need is None or need in have or (need == "CAPABILITY_IAM" and "CAPABILITY_NAMED_IAM" in have)
            check(ok, f"{path}:{line}: {cmd.split(' --')[0]} passes {need}"
                      + (f" (the template names {', '.join(named)})" if named else "") + f" (has {sorted(have)})")
    check(found, "a deploy command is documented (docs/deploying.md, deploy/README.md)")


# --- Issue 40 item 8: the image built for the tasks' architecture -------------------------------

BUILD_COMMAND = re.compile(r"\b((?:docker|podman)\s+(?:buildx\s+)?build|buildah\s+(?:bud|build))\b")
# ECS's CpuArchitecture -> the --platform an image for it is built with.
PLATFORMS = {"X86_64": "linux/amd64", "ARM64": "linux/arm64"}


def check_build_commands(raw, docs):
    """Every documented image build (`docker build`, `podman build`, `buildx build`, `buildah
    bud`) passes --platform for the task definitions' CpuArchitecture: an image built on an
    arm64 laptop without it crash-loops on x86_64 Fargate (exec format error)."""
    archs = {td["Properties"].get("RuntimePlatform", {}).get("CpuArchitecture")
             for td in resources(raw, "AWS::ECS::TaskDefinition").values()}
    if not check(len(archs) == 1 and next(iter(archs)) in PLATFORMS,
                 f"every task definition's RuntimePlatform names one CpuArchitecture ({sorted(map(str, archs))})"):
        return
    platform = PLATFORMS[archs.pop()]
    found = 0
    for path, text in sorted(docs.items()):
        for line, cmd in doc_commands(text, BUILD_COMMAND):
            found += 1
            m = re.search(r"--platform[ =](\S+)", cmd)
            check(m is not None and m.group(1).strip("\"'") == platform,
                  f"{path}:{line}: {cmd[:60]} builds for the tasks' {platform} (--platform {platform})")
    check(found, "an image build command is documented (deploy/README.md, docs/deploying.md)")


def deploy_docs():
    """{path: text} of the repository's Markdown files."""
    out = {}
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_DOCS and not d.startswith(".")]
        for f in files:
            if f.endswith(".md"):
                path = Path(top, f)
                out[str(path.relative_to(ROOT))] = path.read_text()
    return out


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "deploy/template.yaml"
    raw = load(path)
    modes = raw["Parameters"]["ConnectMode"]
    check(modes.get("Default") == "gateway", "ConnectMode: gateway is the default")
    for mode in modes["AllowedValues"]:
        for arn in ("", EXAMPLE_PROXIES_ARN):
            check_mode(resolve(raw, {"ConnectMode": mode, MANAGED_PROXIES_PARAM: arn}), mode, bool(arn))
    MODE[0] = ""
    check_redeploy(raw)
    check_alarm_topic(raw)
    check_name_lengths(raw)
    check_deploy_commands(raw, deploy_docs())
    check_build_commands(raw, deploy_docs())
    for mode in modes["AllowedValues"]:
        MODE[0] = f"{mode}, cloudfront"
        check_edge(resolve(raw, {"EdgeCloudFront": "true", "ConnectMode": mode}), True, mode == "gateway")
    MODE[0] = ""

    for n in notes:
        print(f"check_template: note: {n}", file=sys.stderr)
    for f in failures:
        print(f"check_template: FAILED: {f}", file=sys.stderr)
    print(f"check_template: {len(failures)} failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
