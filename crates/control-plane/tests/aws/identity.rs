//! A task's identity for the task API (`wallcrawler_aws::task_identity`) against moto's STS
//! with IAM enforced (only then does moto check signatures, as STS always does): a task role
//! session's signature names that session; a signature altered in any part, or made with
//! credentials STS does not know, names nobody.

use wallcrawler_aws::task_identity::{IdentityError, Verifier, sign};
use wallcrawler_contract::task_api::{CallerTask, SignedIdentity};
use wallcrawler_testkit::moto::assume_role;
use wallcrawler_testkit::platform::enforce_iam;
use wallcrawler_testkit::{Moto, dummy_credentials};

const TASK_ROLE: &str = "arn:aws:iam::123456789012:role/wc-task";
const TASK_ID: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn a_task_roles_signature_names_its_task_and_an_altered_one_nobody() {
    // IAM enforcement is global to a moto server: this test has one of its own.
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    let task = assume_role(&moto, dummy_credentials(), TASK_ROLE, TASK_ID).await;
    enforce_iam(&moto).await;
    let verifier = Verifier::new(&moto.sdk_config_as(dummy_credentials()).await).unwrap();

    let id = sign(&moto.sdk_config_as(task.clone()).await).await.unwrap();
    // What crosses the wire is what the contract accepts.
    let id = SignedIdentity::decode(&id.encode()).unwrap();
    let arn = verifier.caller(&id).await.unwrap();
    let caller = CallerTask::from_arn(&arn).unwrap_or_else(|| panic!("a task: {arn}"));
    assert_eq!(
        (caller.role.as_str(), caller.task_id.as_str()),
        ("wc-task", TASK_ID)
    );

    // Any signed part changed: refused by STS.
    let mut altered = id.clone();
    let last = altered.authorization.pop().unwrap();
    altered
        .authorization
        .push(if last == '0' { '1' } else { '0' });
    let mut later = id.clone();
    let second = later.amz_date.remove(14);
    later
        .amz_date
        .insert(14, if second == '0' { '1' } else { '0' });
    let mut other_token = id.clone();
    other_token.security_token.push('x');
    for (what, forged) in [
        ("signature", altered),
        ("date", later),
        ("token", other_token),
    ] {
        match verifier.caller(&forged).await {
            Err(IdentityError::Refused(_)) => {}
            other => panic!("{what} altered: {other:?}"),
        }
    }
    // Long-term keys (no session token): never a task role's.
    let unknown = sign(&moto.sdk_config_as(dummy_credentials()).await).await;
    assert!(
        matches!(unknown, Err(IdentityError::Unconfigured("session token"))),
        "long-term keys are no task's: {unknown:?}"
    );
}
