//! TEMPORARY STUB (helper ctl): the lead's module replaces this file; signatures only.
#![allow(missing_docs)]

use aws_config::SdkConfig;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use wallcrawler_contract::task_api::SignedIdentity;

pub type HttpsClient = Client<HttpConnector, Full<Bytes>>;

#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct SignError;

pub async fn sign(_sdk: &SdkConfig) -> Result<SignedIdentity, SignError> {
    Ok(SignedIdentity {
        authorization: format!(
            "AWS4-HMAC-SHA256 Credential=ASIA/20261126/us-east-1/sts/aws4_request, \
             SignedHeaders={}, Signature=0",
            wallcrawler_contract::task_api::SIGNED_HEADERS
        ),
        amz_date: "20261126T101010Z".into(),
        security_token: "stub".into(),
    })
}

pub fn https_client() -> HttpsClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}
