//! `wallcrawler-authorizer-lambda`: an API Gateway REQUEST authorizer (payload format 1.0, IAM
//! policy answers) running the API's own key check (`auth::authorize`): Allow with context
//! `projectId` and `projectIds`, Deny (403) for inactive keys or projects and foreign projects,
//! `Unauthorized` (401) for a missing or unknown key. Reads only `API_KEYS_TABLE_NAME` and
//! `PROJECTS_TABLE_NAME`.

use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest;
use lambda_runtime::{LambdaEvent, service_fn};
use wallcrawler_control_plane::aws::{self, lambda};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (tables, dynamo) = lambda::tables_from_env().await;
    let auth = lambda::Authorizer {
        keys: Arc::new(aws::DynamoKeys::new(dynamo.clone(), &tables.api_keys)),
        projects: Arc::new(aws::DynamoProjects::new(dynamo, &tables.projects)),
    };
    lambda_runtime::run(service_fn(
        |ev: LambdaEvent<ApiGatewayCustomAuthorizerRequestTypeRequest>| {
            let auth = auth.clone();
            async move { lambda::authorize_request(&auth, &ev.payload).await }
        },
    ))
    .await
}
