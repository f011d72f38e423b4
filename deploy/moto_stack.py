#!/usr/bin/env python3
"""Creates deploy/template.yaml as a stack in a moto server — for the tests only.

    .venv/bin/python deploy/moto_stack.py --endpoint http://127.0.0.1:PORT --prefix wc-test-1

moto 5.2.5's CloudFormation refuses some resource types of the real template (create-stack
answers HTTP 500, or a reference to the missing resource leaves the stack CREATE_IN_PROGRESS
forever). This script changes a copy of the template, never the file, in exactly these ways:

- the token key secrets (which moto's CloudFormation would refuse too) are not the stack's: as
  the operator does (deploy/README.md, "Signing keys"), this script makes them before the stack,
  holding a fresh Ed25519 pair, and passes their ARNs as the SigningSecret and PublicKeySecret
  parameters;
- AWS::S3::BucketPolicy: removed; after the stack is up, the same policy document is put on the
  bucket with the plain PutBucketPolicy;
- AWS::ApiGateway::Stage: removed; after the stack is up, the stage is created with the plain
  CreateStage on the stack's deployment;
- AWS::ElasticLoadBalancingV2::LoadBalancer and ::Listener (gateway mode): moto's CloudFormation
  ignores the load balancer's `Type` and makes an application load balancer, whose TLS listener
  it then refuses (create-stack: "ValidationError: Listener protocol 'TLS' must be one of
  'HTTP, HTTPS'"). The network load balancer is created before the stack with the plain
  CreateLoadBalancer (Type network), every reference to it (Ref, GetAtt DNSName, Sub) replaced
  by its ARN or DNS name; after the stack is up it gets the stack's security group
  (SetSecurityGroups) and the listener is created with the plain CreateListener (TLS 443, the
  template's certificate, policy and forward action);
- AWS::ElasticLoadBalancingV2::TargetGroup, and the task API's internal application load
  balancer (gateway mode): made by the stack (its HTTPS listener with the certificate below,
  its fixed-response 404 and its ListenerRule, path-pattern and http-request-method, are kept
  as written), but moto ignores TargetGroupAttributes (PROXY protocol v2, deregistration delays)
  and LoadBalancerAttributes (the idle timeout, dropping invalid header fields), so they are
  put afterwards with the plain ModifyTargetGroupAttributes and ModifyLoadBalancerAttributes
  (outputs moto:<logical id>Arn name them);
- AWS::CloudFormation::WaitConditionHandle: moto creates nothing for one; the template's
  (PoolWaitsForTaskApi, InternalRoutesReady) only order what names them in its DependsOn after
  a conditional resource. Left out, those DependsOn dropped;
- a container's variable under a condition (`Environment: [..., !If [Cond, {variable},
  !Ref AWS::NoValue]]`: the browser tasks' TASK_API_ADDRESS, gateway mode only): moto keeps
  the false branch as a null variable. Taken as CloudFormation would with the parameters;

- AWS::WAFv2::WebACL and ::WebACLAssociation: moto's CloudFormation skips both (its log says
  "No Moto CloudFormation support", the stack completes without them), and the association
  refers to the stage, made here after the stack. Both are removed; after the stage, the web
  ACL is created with the plain CreateWebACL (its properties with the parameters' values and
  the EdgeCloudFront condition taken) and associated with the stage with AssociateWebACL
  (moto then shows it as the stage's webAclArn); the output moto:ApiWebAclArn names it;
- AWS::CloudFront::Distribution and ::Function (EdgeCloudFront true only): skipped by moto's
  CloudFormation too, and nothing in the stack test goes through them: left out, asserted by
  check_template.
  (moto's plain CreateDistribution works; CreateOriginRequestPolicy answers 404, which is
  why the template uses the managed request policy.)
- a role's inline policy under a condition (`Policies: [..., !If [Cond, {policy},
  !Ref AWS::NoValue]]`: the API role's managed-proxies policy): moto's CloudFormation keeps the
  false branch as None in the list and create-stack answers HTTP 500 (moto/iam/models.py reads
  None["PolicyName"]). That role's Policies are taken as CloudFormation would with the stack's
  parameters (check_template's resolve): the condition's policy kept or left out, every other
  policy as written. (A condition inside a Statement list moto keeps as a null statement, which
  grants nothing: left as it is.)

moto's CloudFormation creates the session events' resources as they are: the sessions table's
NEW_AND_OLD_IMAGES stream, the KMS-encrypted SNS topic, the event source mapping with every
setting kept (bisect, retries, record age, ReportBatchItemFailures, on-failure destination;
note moto's ListEventSourceMappings matches FunctionName by name, not by ARN). moto cannot run
the function here (no Docker), so nothing consumes the stream in moto: the processor's test
feeds it the stream's records itself.

moto also accepts AWS::ApiGateway::Authorizer but creates nothing (the method has no authorizer
id), and its UpdateMethod fails on /authorizerId, so the authorizer wiring is not recreated here:
deploy/check_template.py asserts it on the template, and the API itself is not called through
API Gateway in the stack test (the control plane runs as a library on the stack's resources).

What moto accepts but ignores (TTL, PITR, task-level Fargate settings, the bucket's public access
block and lifecycle, managed policies) is asserted on the template by deploy/check_template.py.

The stack's parameters for moto: moto's default VPC and one default subnet, a placeholder image,
and a code bucket holding five placeholder zips (moto stores Lambda code but cannot run it here).
Every wait is bounded. Prints one JSON object on stdout: the stack's outputs, the API function's
environment and the controller container's environment as moto holds them, the gateway's and
the task API service's containers (gateway mode; null in direct mode), and what was changed:

    {"stack", "seconds", "outputs": {...}, "apiEnv": {...}, "taskEnv": {...},
     "gateway": {"command": [...], "env": {...}} | null,
     "taskApi": {"entryPoint": [...], "command": [...], "env": {...}} | null,
     "changed": [...]}
Progress and errors go to stderr; exit status 1 on failure.
"""

import argparse
import io
import json
import sys
import time
import zipfile
from pathlib import Path

import boto3
from cfnlint.decode import decode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy"))
REPLACED_BY_API = (
    "AWS::S3::BucketPolicy",
    "AWS::ApiGateway::Stage",
    "AWS::WAFv2::WebACL",
    "AWS::WAFv2::WebACLAssociation",
)
# What moto's CloudFormation skips (it logs "No Moto CloudFormation support") and whose plain
# API this stack does not need: left to deploy/check_template.py. A wait condition handle moto
# creates nothing for (its NULL_MODELS); the template's only order what depends on them after
# a conditional resource (a reference in their Metadata), which moto's creation order does not
# need.
LEFT_OUT = ("AWS::CloudFront::Distribution", "AWS::CloudFront::Function", "AWS::CloudFormation::WaitConditionHandle")


def log(msg):
    print(f"[moto_stack] {msg}", file=sys.stderr, flush=True)


def replace_attrs(node, name, ref, attrs):
    """Replaces {"Ref": name} by `ref`, {"Fn::GetAtt": [name, A]} by attrs[A], and ${name} /
    ${name.A} inside Fn::Sub strings by the same values."""
    if isinstance(node, dict):
        if list(node.keys()) == ["Ref"] and node["Ref"] == name:
            return ref
        if list(node.keys()) == ["Fn::GetAtt"]:
            v = node["Fn::GetAtt"]
            res, attr = (v[0], v[1]) if isinstance(v, list) else v.split(".", 1)
            if res == name:
                return attrs[attr]
        if list(node.keys()) == ["Fn::Sub"]:
            v = node["Fn::Sub"]
            text, extra = (v[0], v[1]) if isinstance(v, list) else (v, None)
            text = text.replace("${" + name + "}", ref)
            for attr, value in attrs.items():
                text = text.replace("${" + name + "." + attr + "}", value)
            return {"Fn::Sub": [text, replace_attrs(extra, name, ref, attrs)] if extra is not None else text}
        return {k: replace_attrs(v, name, ref, attrs) for k, v in node.items()}
    if isinstance(node, list):
        return [replace_attrs(v, name, ref, attrs) for v in node]
    return node


def drop_depends_on(resources, name):
    for other in resources.values():
        deps = other.get("DependsOn")
        if deps == name:
            del other["DependsOn"]
        elif isinstance(deps, list) and name in deps:
            other["DependsOn"] = [d for d in deps if d != name]


def mentions(node, name):
    """Whether node refers to the logical id `name` in any way (Ref, GetAtt, Sub)."""
    if isinstance(node, dict):
        return any(
            (k == "Ref" and v == name)
            or (k == "Fn::GetAtt" and (v[0] if isinstance(v, list) else v.split(".")[0]) == name)
            or (k == "Fn::Sub" and f"${{{name}" in json.dumps(v))
            or mentions(v, name)
            for k, v in node.items()
        )
    if isinstance(node, list):
        return any(mentions(v, name) for v in node)
    return False


def resolve_conditions(template, res, params):
    """`res` with its Fn::If taken and AWS::NoValue dropped, as CloudFormation would with
    `params` (deploy/check_template.py's resolve)."""
    from check_template import resolve

    one = {k: v for k, v in template.items() if k != "Outputs"}
    one["Resources"] = {"R": res}
    return resolve(one, params)["Resources"]["R"]


def plain_values(node, values):
    """`node` with each Ref to a parameter and each ${Parameter} of a Fn::Sub replaced by its
    value (what a deferred resource made with its plain API refers to)."""
    if isinstance(node, dict):
        if list(node) == ["Ref"] and node["Ref"] in values:
            return values[node["Ref"]]
        if list(node) == ["Fn::Sub"] and isinstance(node["Fn::Sub"], str):
            text = node["Fn::Sub"]
            for k, v in values.items():
                text = text.replace("${" + k + "}", str(v))
            if "${" in text:
                sys.exit(f"moto_stack: unresolved {text}")
            return text
        return {k: plain_values(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [plain_values(v, values) for v in node]
    return node


def create_token_key_secrets(sm, prefix):
    """The operator's key step before the stack (deploy/README.md, "Signing keys"): one fresh
    Ed25519 pair, its private key in `<prefix>/jwt-signing-key`, its public key in
    `<prefix>/jwt-public-key`; their ARNs as the stack's parameters of the same names."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()).decode()
    public = key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo).decode()
    values = {
        "SigningSecret": (f"{prefix}/jwt-signing-key", {"algorithm": "EdDSA", "privateKey": private}),
        "PublicKeySecret": (f"{prefix}/jwt-public-key", {"algorithm": "EdDSA", "publicKey": public}),
    }
    return {
        param: sm.create_secret(Name=name, SecretString=json.dumps(value))["ARN"]
        for param, (name, value) in values.items()
    }


def placeholder_zip():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("bootstrap")
        info.external_attr = 0o755 << 16
        z.writestr(info, "#!/bin/sh\necho 'placeholder: moto cannot run functions here' >&2\nexit 1\n")
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="moto server URL (loopback)")
    ap.add_argument("--prefix", required=True, help="NamePrefix of the stack (unique per test)")
    ap.add_argument("--template", default=str(ROOT / "deploy/template.yaml"))
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for the stack")
    ap.add_argument("--connect-mode", default="gateway", choices=["gateway", "direct"], help="ConnectMode")
    a = ap.parse_args()
    if not a.endpoint.startswith(("http://127.", "http://localhost", "http://[::1]")):
        sys.exit("moto_stack: the endpoint must be a loopback address")

    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    client = lambda svc: session.client(svc, endpoint_url=a.endpoint)  # noqa: E731
    cfn, ec2, s3, sm = client("cloudformation"), client("ec2"), client("s3"), client("secretsmanager")

    template, matches = decode(a.template)
    if matches:
        sys.exit(f"moto_stack: cannot parse {a.template}: {matches}")
    template = json.loads(json.dumps(template))  # plain dicts and strings
    resources = template["Resources"]
    changed = []

    # --- What moto refuses: made through the plain APIs -------------------------------------
    deferred = {}
    for name, res in list(resources.items()):
        if res["Type"] not in REPLACED_BY_API + LEFT_OUT:
            continue
        del resources[name]
        if res["Type"] == "AWS::CloudFormation::WaitConditionHandle":
            changed.append(f"{name}: left out (a wait condition handle, which moto creates nothing for), DependsOn on it dropped")
        elif res["Type"] in LEFT_OUT:
            changed.append(f"{name}: left out ({res['Type']}: moto's CloudFormation skips it; deploy/check_template.py asserts it)")
        else:
            deferred[name] = res
        drop_depends_on(resources, name)
    template.get("Outputs", {}).pop("ApiCloudFrontDomain", None)
    template.get("Outputs", {}).pop("ApiWebAclArn", None)
    for name in deferred:
        left = [k for k, v in template.items() if k != "Resources" and mentions(v, name)]
        left += [k for k, v in resources.items() if mentions(v, name)]
        if left:
            sys.exit(f"moto_stack: {name} is still referred to by {left}")

    # --- Parameters for moto --------------------------------------------------------------
    default_vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]
    vpc, vpc_cidr = default_vpc["VpcId"], default_vpc["CidrBlock"]
    subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"][0]["SubnetId"]
    # The TLS listener's certificate (moto's ACM issues one at once).
    certificate = client("acm").request_certificate(DomainName="connect.wallcrawler.test")["CertificateArn"]
    code_bucket = f"{a.prefix}-lambda-code"
    s3.create_bucket(Bucket=code_bucket)
    params = {
        "NamePrefix": a.prefix,
        "VpcId": vpc,
        "ConnectMode": a.connect_mode,
        "VpcCidr": vpc_cidr,
        "SubnetIds": subnet,
        # moto's default VPC has no private subnets; one subnet stands for both kinds.
        "PrivateSubnetIds": subnet,
        "ConnectCertificateArn": certificate,
        "ClientCidr": "127.0.0.1/32",
        "ImageUri": "wallcrawler-controller:moto",
        "LambdaCodeBucket": code_bucket,
        **create_token_key_secrets(sm, a.prefix),
    }
    for key_param in ("ApiLambdaKey", "AuthorizerLambdaKey", "TaskEventsLambdaKey", "SweeperLambdaKey", "SessionEventsLambdaKey"):
        s3.put_object(Bucket=code_bucket, Key=template["Parameters"][key_param]["Default"], Body=placeholder_zip())

    # --- The network load balancer and its listener (gateway mode): the plain API ----------
    elbv2 = client("elbv2")
    nlb = None
    # The network one (the connect leg's); the task API's internal application load balancer,
    # its HTTPS listener and rule are the stack's.
    lbs = {k: v for k, v in resources.items()
           if v["Type"] == "AWS::ElasticLoadBalancingV2::LoadBalancer" and v["Properties"].get("Type") == "network"}
    listeners = {k: v for k, v in resources.items()
                 if v["Type"] == "AWS::ElasticLoadBalancingV2::Listener" and v["Properties"].get("LoadBalancerArn") in [{"Ref": n} for n in lbs]}
    if a.connect_mode == "gateway" and lbs:
        ((lb_name, lb),) = lbs.items()
        ((listener_name, listener),) = listeners.items()
        p = lb["Properties"]
        made = elbv2.create_load_balancer(
            Name=f"{a.prefix}-connect"[:32],
            Type=p["Type"],
            Scheme=p["Scheme"],
            Subnets=[subnet],
        )["LoadBalancers"][0]
        nlb = {"name": lb_name, "arn": made["LoadBalancerArn"], "dns": made["DNSName"], "listener": listener,
               "properties": p}
        for name in (lb_name, listener_name):
            del resources[name]
            drop_depends_on(resources, name)
        template = replace_attrs(
            template, lb_name, nlb["arn"],
            {"DNSName": made["DNSName"], "CanonicalHostedZoneID": made["CanonicalHostedZoneId"]},
        )
        resources = template["Resources"]
        changed.append(f"{lb_name}: created with CreateLoadBalancer (Type {made['Type']}), references -> its ARN and DNS name")
        for name in (lb_name, listener_name):
            left = [k for k, v in template.items() if k != "Resources" and mentions(v, name)]
            left += [k for k, v in resources.items() if mentions(v, name)]
            if left:
                sys.exit(f"moto_stack: {name} is still referred to by {left}")

    # --- Inline policies under a condition: taken as CloudFormation would -----------------
    for name, res in resources.items():
        policies = res.get("Properties", {}).get("Policies") if res["Type"] == "AWS::IAM::Role" else None
        if isinstance(policies, list) and any(isinstance(x, dict) and list(x) == ["Fn::If"] for x in policies):
            taken = resolve_conditions(template, res, params)["Properties"].get("Policies", [])
            res["Properties"]["Policies"] = taken
            changed.append(f"{name}: Policies' Fn::If taken with the parameters ({[x['PolicyName'] for x in taken]})")
    # --- A container's variable under a condition (the browser tasks' TASK_API_ADDRESS, gateway
    # mode only): moto keeps the false branch's AWS::NoValue as a null variable, which its
    # DescribeTaskDefinition then answers as null. Taken as CloudFormation would. --------------
    for name, res in resources.items():
        if res["Type"] != "AWS::ECS::TaskDefinition":
            continue
        for i, c in enumerate(res["Properties"].get("ContainerDefinitions", [])):
            env = c.get("Environment", [])
            if any(isinstance(x, dict) and list(x) == ["Fn::If"] for x in env):
                taken = resolve_conditions(template, res, params)["Properties"]["ContainerDefinitions"][i]["Environment"]
                c["Environment"] = taken
                changed.append(f"{name}: {c['Name']}'s Environment Fn::If taken with the parameters")

    # --- The stack ------------------------------------------------------------------------
    stack = f"{a.prefix}-stack"
    started = time.monotonic()
    cfn.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    deadline = started + a.timeout
    while True:
        desc = cfn.describe_stacks(StackName=stack)["Stacks"][0]
        status = desc["StackStatus"]
        if status != "CREATE_IN_PROGRESS":
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if status != "CREATE_COMPLETE":
        for ev in cfn.describe_stack_events(StackName=stack)["StackEvents"]:
            if ev.get("ResourceStatusReason"):
                log(f"{ev['LogicalResourceId']}: {ev['ResourceStatus']}: {ev['ResourceStatusReason']}")
        sys.exit(f"moto_stack: stack {stack} is {status} after {time.monotonic() - started:.1f} s")
    log(f"stack {stack} CREATE_COMPLETE in {time.monotonic() - started:.2f} s")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
    # (moto leaves some ids out, e.g. of the authorizer and the deployment)
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.describe_stack_resources(StackName=stack)["StackResources"]
        if r.get("LogicalResourceId") and r.get("PhysicalResourceId")
    }

    # --- The deferred resources, through the plain APIs (in the template's order: the stage
    # before the web ACL's association) -----------------------------------------------------
    acls, stage_arn = {}, None
    for name, res in deferred.items():
        p = res["Properties"]
        if res["Type"] == "AWS::S3::BucketPolicy":
            bucket = physical[p["Bucket"]["Ref"]]
            doc = json.dumps(p["PolicyDocument"])
            doc = json.loads(
                doc.replace('{"Fn::GetAtt": ["ContextsBucket", "Arn"]}', json.dumps(f"arn:aws:s3:::{bucket}"))
                .replace('{"Fn::Sub": "${ContextsBucket.Arn}/*"}', json.dumps(f"arn:aws:s3:::{bucket}/*"))
            )
            if "Fn::" in json.dumps(doc):
                sys.exit(f"moto_stack: {name}: unresolved function in {doc}")
            s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(doc))
            changed.append(f"{name}: put with PutBucketPolicy on {bucket}")
        elif res["Type"] == "AWS::ApiGateway::Stage":
            apigw = client("apigateway")
            stage = params.get("StageName", template["Parameters"]["StageName"]["Default"])
            api_id = physical[p["RestApiId"]["Ref"]]
            (deployment,) = apigw.get_deployments(restApiId=api_id)["items"]
            apigw.create_stage(restApiId=api_id, stageName=stage, deploymentId=deployment["id"])
            changed.append(f"{name}: created with CreateStage ({stage})")
            stage_arn = f"arn:aws:apigateway:us-east-1::/restapis/{api_id}/stages/{stage}"
        elif res["Type"] == "AWS::WAFv2::WebACL":
            values = {**{k: v.get("Default") for k, v in template["Parameters"].items()}, **params}
            p = plain_values(resolve_conditions(template, res, params)["Properties"], values)
            made = client("wafv2").create_web_acl(**{k: v for k, v in p.items()})["Summary"]
            acls[name] = made["ARN"]
            changed.append(f"{name}: created with CreateWebACL ({len(p['Rules'])} rules)")
        elif res["Type"] == "AWS::WAFv2::WebACLAssociation":
            acl = acls[p["WebACLArn"]["Fn::GetAtt"][0]]
            client("wafv2").associate_web_acl(WebACLArn=acl, ResourceArn=stage_arn)
            changed.append(f"{name}: AssociateWebACL on the stage {stage_arn}")
            outputs["moto:ApiWebAclArn"] = acl

    if nlb is not None:
        p = nlb["properties"]
        groups = [physical[g["Fn::GetAtt"][0]] for g in p.get("SecurityGroups", [])]
        elbv2.set_security_groups(LoadBalancerArn=nlb["arn"], SecurityGroups=groups)
        elbv2.modify_load_balancer_attributes(LoadBalancerArn=nlb["arn"], Attributes=p.get("LoadBalancerAttributes", []))
        lp = nlb["listener"]["Properties"]
        (action,) = lp["DefaultActions"]
        tg_name = action["TargetGroupArn"]["Ref"]
        tg_arn = physical[tg_name]
        cert = lp["Certificates"][0]["CertificateArn"]
        cert = params[cert["Ref"]] if isinstance(cert, dict) else cert
        listener_arn = elbv2.create_listener(
            LoadBalancerArn=nlb["arn"],
            Protocol=lp["Protocol"],
            Port=lp["Port"],
            Certificates=[{"CertificateArn": cert}],
            SslPolicy=lp["SslPolicy"],
            DefaultActions=[{"Type": action["Type"], "TargetGroupArn": tg_arn}],
        )["Listeners"][0]["ListenerArn"]
        changed.append(f"{nlb['name']}: security groups {groups} with SetSecurityGroups; its listener with CreateListener")
        outputs["moto:ConnectListenerArn"] = listener_arn
        outputs["moto:GatewayTargetGroupArn"] = tg_arn
        outputs["moto:ConnectLoadBalancerArn"] = nlb["arn"]

    # What moto's CloudFormation ignores of the stack's load balancers and target groups (the
    # task API's idle timeout and header policy, the gateway's PROXY protocol v2, the
    # deregistration delays): put with the plain APIs.
    for name, res in template["Resources"].items():
        attrs_of = {"AWS::ElasticLoadBalancingV2::LoadBalancer": "LoadBalancerAttributes",
                    "AWS::ElasticLoadBalancingV2::TargetGroup": "TargetGroupAttributes"}.get(res["Type"])
        attrs = res.get("Properties", {}).get(attrs_of) if attrs_of else None
        if not attrs or name not in physical:
            continue
        if res["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup":
            elbv2.modify_target_group_attributes(TargetGroupArn=physical[name], Attributes=attrs)
        else:
            elbv2.modify_load_balancer_attributes(LoadBalancerArn=physical[name], Attributes=attrs)
        changed.append(f"{name}: {attrs_of} put with Modify{attrs_of.removesuffix('s')}s")
        outputs[f"moto:{name}Arn"] = physical[name]

    lam, ecs = client("lambda"), client("ecs")
    api_env = lam.get_function_configuration(FunctionName=outputs["ApiFunctionName"])["Environment"]["Variables"]
    td = ecs.describe_task_definition(taskDefinition=outputs["TaskDefinitionArn"])["taskDefinition"]
    (container,) = td["containerDefinitions"]
    task_env = {e["name"]: e["value"] for e in container.get("environment", [])}
    gateway = None
    if "GatewayTaskDefinitionArn" in outputs:
        gtd = ecs.describe_task_definition(taskDefinition=outputs["GatewayTaskDefinitionArn"])["taskDefinition"]
        (g,) = gtd["containerDefinitions"]
        gateway = {
            "command": g.get("command", []),
            "env": {e["name"]: e["value"] for e in g.get("environment", [])},
        }
    # The task API service's container (gateway mode), as the Rust stack test runs it:
    # `wallcrawler-control-plane task-api` with this environment.
    task_api = None
    if "TaskApiTaskDefinitionArn" in outputs:
        ttd = ecs.describe_task_definition(taskDefinition=outputs["TaskApiTaskDefinitionArn"])["taskDefinition"]
        (c,) = ttd["containerDefinitions"]
        task_api = {
            "entryPoint": c.get("entryPoint", []),
            "command": c.get("command", []),
            "env": {e["name"]: e["value"] for e in c.get("environment", [])},
        }
    json.dump(
        {
            "stack": stack,
            "seconds": round(time.monotonic() - started, 3),
            "outputs": outputs,
            "apiEnv": api_env,
            "taskEnv": task_env,
            "gateway": gateway,
            "taskApi": task_api,
            "changed": changed,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
