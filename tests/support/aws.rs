//! A local AWS for the tests: the workspace's one moto server per test binary
//! (`wallcrawler_testkit`), and SDK clients pointed at it. Every test uses
//! its own table, bucket and secret names, so tests run in parallel on the one server.

use std::sync::OnceLock;

pub(crate) use aws_sdk_dynamodb::types::AttributeValue;
use wallcrawler_testkit::tables;

/// Environment for a child process talking to moto.
pub(crate) fn env() -> Vec<(&'static str, String)> {
    wallcrawler_testkit::child_env()
}

/// A runtime for the tests' own SDK calls.
pub(crate) fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// The SDK configuration for moto (built once; call outside `rt().block_on`).
pub(crate) fn sdk() -> aws_config::SdkConfig {
    static SDK: OnceLock<aws_config::SdkConfig> = OnceLock::new();
    SDK.get_or_init(build_sdk).clone()
}

fn build_sdk() -> aws_config::SdkConfig {
    rt().block_on(wallcrawler_testkit::sdk_config())
}

pub(crate) fn dynamo() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk())
}

pub(crate) fn s3() -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk())
            .force_path_style(true)
            .build(),
    )
}

pub(crate) fn secrets() -> aws_sdk_secretsmanager::Client {
    aws_sdk_secretsmanager::Client::new(&sdk())
}

pub(crate) fn ec2() -> aws_sdk_ec2::Client {
    aws_sdk_ec2::Client::new(&sdk())
}

pub(crate) use wallcrawler_testkit::unique;

/// Creates a sessions table as the template declares it.
pub(crate) fn create_sessions_table() -> String {
    let sdk = sdk();
    rt().block_on(tables::create(&sdk, &tables::SESSIONS))
}

pub(crate) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// Puts a session item.
pub(crate) fn put_session(table: &str, item: Vec<(&str, AttributeValue)>) {
    let c = dynamo();
    let mut req = c.put_item().table_name(table);
    for (k, v) in item {
        req = req.item(k, v);
    }
    rt().block_on(req.send()).unwrap();
}

/// Reads a session item (strongly consistent).
pub(crate) fn get_session(
    table: &str,
    id: &str,
) -> std::collections::HashMap<String, AttributeValue> {
    let c = dynamo();
    let out = rt()
        .block_on(
            c.get_item()
                .table_name(table)
                .key("sessionId", s(id))
                .consistent_read(true)
                .send(),
        )
        .unwrap();
    out.item().cloned().unwrap_or_default()
}

pub(crate) fn text(
    item: &std::collections::HashMap<String, AttributeValue>,
    k: &str,
) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

pub(crate) fn number(
    item: &std::collections::HashMap<String, AttributeValue>,
    k: &str,
) -> Option<f64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
}

pub(crate) fn create_bucket() -> String {
    let name = unique("contexts");
    rt().block_on(s3().create_bucket().bucket(&name).send())
        .unwrap();
    name
}

pub(crate) fn put_object(bucket: &str, key: &str, body: Vec<u8>) {
    rt().block_on(
        s3().put_object()
            .bucket(bucket)
            .key(key)
            .body(body.into())
            .send(),
    )
    .unwrap();
}

pub(crate) fn get_object(bucket: &str, key: &str) -> Option<Vec<u8>> {
    let client = s3();
    rt().block_on(async move {
        let out = client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .ok()?;
        Some(out.body.collect().await.ok()?.into_bytes().to_vec())
    })
}

/// Creates a public key secret holding the public key of the key pair named `key`
/// ([`wallcrawler_testkit::keys`]): what a controller reads. Returns its ARN.
pub(crate) fn create_secret(key: &str) -> String {
    let name = unique("jwt");
    let out = rt()
        .block_on(
            secrets()
                .create_secret()
                .name(&name)
                .secret_string(secret_json(key))
                .send(),
        )
        .unwrap();
    out.arn().unwrap().to_owned()
}

/// Puts the public key of `key` as the secret's new `AWSCURRENT` (the last one becomes
/// `AWSPREVIOUS`).
pub(crate) fn rotate_secret(arn: &str, key: &str) {
    rt().block_on(
        secrets()
            .put_secret_value()
            .secret_id(arn)
            .secret_string(secret_json(key))
            .send(),
    )
    .unwrap();
}

/// The public key secret's `SecretString` for the key pair named `key`.
pub(crate) fn secret_json(key: &str) -> String {
    wallcrawler_contract::secret::public_secret_string(&wallcrawler_testkit::keys::public_key(key))
}
