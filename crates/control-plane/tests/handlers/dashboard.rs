//! `GET /dashboard` through the router: the page, served without a key (it holds no data),
//! with its Content-Security-Policy (its own script and style by hash, requests to the API
//! only, frames of the viewer's origin only), never framed and never stored.

use super::*;

#[tokio::test]
async fn the_dashboard_is_served_without_a_key_with_its_policy_unframed_and_not_stored() {
    let h = Harness::with_settings(
        LaunchBehaviour::BecomeReady,
        Settings {
            connect_base: Some("wss://connect.example.test".to_owned()),
            ..waiting(Duration::from_millis(400))
        },
    );
    let req = Request::builder()
        .uri("/dashboard")
        .body(Body::empty())
        .unwrap();
    let resp = h.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(header("content-type"), "text/html; charset=utf-8");
    assert_eq!(header("cache-control"), "no-store");
    assert_eq!(header("x-frame-options"), "DENY");
    assert_eq!(header("referrer-policy"), "no-referrer");
    let csp = header("content-security-policy");
    for part in [
        "default-src 'none';",
        "script-src 'sha256-",
        "style-src 'sha256-",
        "connect-src 'self';",
        "frame-src https://connect.example.test;",
        "media-src 'self';",
        "base-uri 'none';",
        "form-action 'none';",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{part} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let html = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        html.contains("id=\"key\"") && html.contains("<script>"),
        "{html}"
    );
    // Not an API route: no retry advice, and the key is not asked for.
    assert!(!html.contains(KEY_A));
}
