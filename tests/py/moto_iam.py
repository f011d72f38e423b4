#!/usr/bin/env python3
"""Credentials limited to a stack's own roles, for running the platform under moto's IAM
enforcement (tests/pool/stack.rs). Run it after the stack is created and BEFORE enforcement is
switched on (`POST /moto-api/reset-auth` with body `0`): until then moto checks nothing.

    .venv/bin/python tests/py/moto_iam.py --endpoint http://127.0.0.1:PORT --stack NAME \\
        --principal api=FUNCTION_NAME --principal task=TASK_DEFINITION_ARN ... \\
        --role session=SessionRole

Each principal is a stack resource (a Lambda function by name, an ECS task definition by ARN);
its role is the one the template gives it (`Role` / `TaskRoleArn`: a `Fn::GetAtt` to a role of
the same stack), found in the template as moto holds it, and the role's physical name in the
stack's resources. Each `--role` is a role of the stack by its logical id that no resource runs
with but another principal assumes (the SessionRole: the API assumes it for one task's session):
its policies are changed as a principal's, and it is not assumed here. Nothing of the
template's statements is written here: they are read from moto.

moto 5.2.5 evaluates identity policies, but (moto/iam/access_control.py, moto/core/responses.py):

- it authorises every action but S3's, SQS's and STS's AssumeRole against the resource "*"
  (only S3 builds bucket/key ARNs, SQS the queue's ARN and STS the assumed role's), so a
  statement scoped to a table, secret, task definition or cluster never matches and everything
  would be denied. Those statements get `Resource: "*"`; S3, SQS and STS statements keep the
  template's resources. What this proves is that every ACTION the code calls is granted;
  deploy/check_template.py asserts the resources.
- it checks an AssumeRole against the role's trust policy by comparing the caller's ARN with an
  `AWS` principal literally, and a caller with a role's credentials is the role's session,
  `arn:aws:sts::<account>:assumed-role/<role>/<session>`, never equal to the role ARN a trust
  policy names (AWS matches a role principal against every session of the role). So a `--role`
  trusting a principal's role gets, beside it, the ARN of the session this script assumed for
  that principal (UpdateAssumeRolePolicy): the same principal, in moto's spelling.
- it keeps an AssumeRole's session policy (`Policy`) but never evaluates it. The moto server
  the tests run (tests/py/moto_server.py) applies it, where moto matches resources at all (S3,
  SQS, STS); its DynamoDB statements (`dynamodb:LeadingKeys`: one session's item) are asserted on
  the policy the API builds (`task_api::session_policy`'s unit tests).
- it stores the inline policies CloudFormation made as Python objects, which its own policy
  evaluation cannot read (it expects JSON text): every inline policy is put again, as JSON, with
  PutRolePolicy.
- it authorises a DynamoDB `TransactWriteItems` as the action `dynamodb:TransactWriteItems`,
  where AWS authorises each of its items as that item's own write (PutItem, UpdateItem,
  DeleteItem; https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html):
  a widened statement that grants any of those also grants moto's name for the transaction.
- it has no request context for `Condition` keys (ecs:cluster, iam:PassedToService, s3:prefix…)
  and treats every condition as met: conditions are kept as written and are not enforced.
- it applies a bucket policy's statements to every object request, with their conditions
  treated as met (and its requests here are plain HTTP on loopback anyway), so the bucket's
  `Deny` unless `aws:SecureTransport` would refuse every object request, authenticated or not:
  with `--bucket`, Deny statements conditioned on `aws:SecureTransport` are removed from that
  bucket's policy (the rest is kept).

Then each role is assumed (STS AssumeRole: moto's assumed-role keys carry the role's policies),
and an IAM user allowed everything is made for the test's own checks (reading items, playing ECS).
Prints one JSON object: {"principals": {label: {"role", "accessKeyId", "secretAccessKey",
"sessionToken"}}, "roles": {label: {"role", "arn"}}, "admin": {"accessKeyId",
"secretAccessKey"}, "widened": [...]}. Secrets go to
stdout only (the test's pipe), never to stderr.
"""

import argparse
import ast
import ipaddress
import json
import sys
import urllib.parse
import uuid

from support import moto_client

# The services whose requests moto authorises against a resource ARN of their own.
SCOPED_BY_MOTO = ("s3", "sqs", "sts")
# The item writes AWS authorises a transaction's items as; moto checks the transaction instead.
ITEM_WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
TRANSACTION = "dynamodb:TransactWriteItems"


def is_loopback(url):
    """Whether `url` is plain HTTP to a loopback address (the host parsed, not a prefix)."""
    u = urllib.parse.urlsplit(url)
    try:
        return u.scheme == "http" and (u.hostname == "localhost" or ipaddress.ip_address(u.hostname).is_loopback)
    except ValueError:
        return False


def as_list(v):
    return v if isinstance(v, list) else [v]


def policy_document(raw):
    """The policy as moto answers it: JSON text, or (made by CloudFormation) a Python repr."""
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return ast.literal_eval(raw)


def widened(doc, role, policy, notes):
    """`doc` with `Resource: "*"` on the actions moto evaluates against "*" (a statement mixing
    them with S3 or SQS actions is split in two)."""
    out = []
    for st in as_list(doc["Statement"]):
        if st is None:
            # An `!If [..., !Ref AWS::NoValue]` statement: AWS drops it, moto keeps a null.
            continue
        actions = as_list(st.get("Action", []))
        widen = [a for a in actions if a.split(":")[0] not in SCOPED_BY_MOTO]
        if not widen or st.get("Resource") == "*":
            out.append(st)
            continue
        keep = [a for a in actions if a not in widen]
        if any(a in ITEM_WRITES for a in widen):
            widen.append(TRANSACTION)
        if keep:
            out.append({**st, "Action": keep})
        sid = st.get("Sid", "")
        out.append({**st, "Action": widen, "Resource": "*", **({"Sid": sid + "OnAny"} if keep and sid else {})})
        notes.append(f"{role}/{policy}/{sid}: {widen} on * (was {st.get('Resource')})")
    return {**doc, "Statement": out}


def without_tls_only(s3, bucket, notes):
    """Removes the bucket policy's Deny statements conditioned on aws:SecureTransport."""
    doc = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    kept = [
        st
        for st in as_list(doc["Statement"])
        if not (st.get("Effect") == "Deny" and "aws:SecureTransport" in json.dumps(st.get("Condition", {})))
    ]
    notes.append(f"bucket policy: {len(as_list(doc['Statement'])) - len(kept)} TLS-only Deny statement(s) removed")
    if kept:
        s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({**doc, "Statement": kept}))
    else:
        s3.delete_bucket_policy(Bucket=bucket)


def role_of(template, physical, ident):
    """The logical id of the role the stack resource `ident` (its physical id) runs with."""
    for name, res in template["Resources"].items():
        if physical.get(name) != ident:
            continue
        props = res.get("Properties", {})
        ref = props.get("Role") or props.get("TaskRoleArn")
        if isinstance(ref, dict) and "Fn::GetAtt" in ref:
            att = ref["Fn::GetAtt"]
            return att[0] if isinstance(att, list) else att.split(".")[0]
        sys.exit(f"moto_iam: {name} has no role of the stack: {ref}")
    sys.exit(f"moto_iam: no resource of the stack is {ident}")


def trusting_sessions(doc, sessions, role, notes):
    """`doc` (a trust policy) with, beside each `AWS` principal that is a role ARN in
    `sessions`, that role's session ARN (moto compares the caller's ARN literally)."""
    out = []
    for st in as_list(doc["Statement"]):
        aws = as_list(st.get("Principal", {}).get("AWS", []))
        added = [sessions[p] for p in aws if p in sessions]
        if added:
            st = {**st, "Principal": {**st["Principal"], "AWS": aws + added}}
            notes.append(f"{role}: trust policy: + {added} beside the role (moto matches a principal literally)")
        out.append(st)
    return {**doc, "Statement": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="moto server URL (loopback)")
    ap.add_argument("--stack", required=True)
    ap.add_argument("--principal", action="append", default=[], help="LABEL=PHYSICAL_ID")
    ap.add_argument("--role", action="append", default=[], help="LABEL=LOGICAL_ID of a role assumed by a principal")
    ap.add_argument("--bucket", action="append", default=[], help="a bucket whose TLS-only Deny goes")
    a = ap.parse_args()
    if not is_loopback(a.endpoint):
        sys.exit("moto_iam: the endpoint must be a loopback address")

    cfn, iam, sts = (moto_client(a.endpoint, svc) for svc in ("cloudformation", "iam", "sts"))

    template = cfn.get_template(StackName=a.stack)["TemplateBody"]
    template = json.loads(template) if isinstance(template, str) else template
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.describe_stack_resources(StackName=a.stack)["StackResources"]
        if r.get("LogicalResourceId") and r.get("PhysicalResourceId")
    }
    notes, principals, sessions = [], {}, {}

    def put_widened(label, role):
        for policy in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            raw = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
            doc = widened(policy_document(raw), label, policy, notes)
            iam.put_role_policy(RoleName=role, PolicyName=policy, PolicyDocument=json.dumps(doc))

    for bucket in a.bucket:
        without_tls_only(moto_client(a.endpoint, "s3"), bucket, notes)
    for p in a.principal:
        label, ident = p.split("=", 1)
        role = physical[role_of(template, physical, ident)]
        put_widened(label, role)
        arn = iam.get_role(RoleName=role)["Role"]["Arn"]
        assumed = sts.assume_role(RoleArn=arn, RoleSessionName=f"wallcrawler-{label}")
        creds = assumed["Credentials"]
        sessions[arn] = assumed["AssumedRoleUser"]["Arn"]
        principals[label] = {
            "role": role,
            "accessKeyId": creds["AccessKeyId"],
            "secretAccessKey": creds["SecretAccessKey"],
            "sessionToken": creds["SessionToken"],
        }
    roles = {}
    for r in a.role:
        label, logical = r.split("=", 1)
        if template["Resources"].get(logical, {}).get("Type") != "AWS::IAM::Role" or logical not in physical:
            sys.exit(f"moto_iam: {logical} is no role of the stack")
        role = physical[logical]
        put_widened(label, role)
        found = iam.get_role(RoleName=role)["Role"]
        trust = trusting_sessions(policy_document(found["AssumeRolePolicyDocument"]), sessions, label, notes)
        iam.update_assume_role_policy(RoleName=role, PolicyDocument=json.dumps(trust))
        roles[label] = {"role": role, "arn": found["Arn"]}

    admin = f"wallcrawler-test-admin-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=admin)
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    iam.put_user_policy(UserName=admin, PolicyName="everything", PolicyDocument=json.dumps(everything))
    key = iam.create_access_key(UserName=admin)["AccessKey"]
    json.dump(
        {
            "principals": principals,
            "roles": roles,
            "admin": {"accessKeyId": key["AccessKeyId"], "secretAccessKey": key["SecretAccessKey"]},
            "widened": notes,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
