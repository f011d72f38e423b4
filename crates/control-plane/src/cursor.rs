//! The cursor of `GET /v1/sessions`: where the next page starts, opaque to clients.
//!
//! A cursor is `<payload>.<mac>`: the payload is base64url JSON naming the project and the
//! last listed session (`createdAt`, `sessionId`), the MAC an HMAC-SHA256 of it with a key
//! derived from the control plane's private key ([`Signer::mac`]: no task or gateway, which
//! hold public keys only, can make one). A cursor is hostile input: one that was altered, was made by
//! someone else, or was issued to another project is refused with a 400, so a cursor can only
//! ever move a caller through its own project's sessions. (After a rotation of the signing
//! key, older cursors are refused too: the listing starts again.)

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::stores::{ListPos, Signer};

/// Longest cursor accepted (ours are about 200 characters).
const MAX_LEN: usize = 1024;

/// What the MAC covers besides the payload: no other value the key MACs can pass as a cursor.
const DOMAIN: &[u8] = b"wallcrawler GET /v1/sessions cursor v1\n";

#[derive(Serialize, Deserialize)]
struct Payload {
    /// The project listed.
    p: String,
    /// The last listed session's `createdAt`.
    c: String,
    /// The last listed session's id.
    s: String,
}

async fn mac(signer: &dyn Signer, payload: &str) -> Result<String, ApiError> {
    let msg = [DOMAIN, payload.as_bytes()].concat();
    Ok(signer.mac(&msg).await?)
}

/// The cursor that goes on after `pos` in `project_id`'s listing.
pub async fn seal(
    signer: &dyn Signer,
    project_id: &str,
    pos: &ListPos,
) -> Result<String, ApiError> {
    let json = serde_json::to_vec(&Payload {
        p: project_id.to_owned(),
        c: pos.created_at.clone(),
        s: pos.session_id.clone(),
    })
    .map_err(|e| ApiError::internal(format!("a cursor did not serialize: {e}")))?;
    let payload = URL_SAFE_NO_PAD.encode(json);
    let mac = mac(signer, &payload).await?;
    Ok(format!("{payload}.{mac}"))
}

/// Where `cursor` goes on in `project_id`'s listing; 400 unless it is one of ours, unaltered,
/// issued for this project.
pub async fn open(
    signer: &dyn Signer,
    project_id: &str,
    cursor: &str,
) -> Result<ListPos, ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "cursor is not valid: pass back a cursor exactly as a previous page gave it, or list from the start without one",
        )
    };
    if cursor.len() > MAX_LEN {
        return Err(invalid());
    }
    let (payload, got) = cursor.split_once('.').ok_or_else(invalid)?;
    let want = mac(signer, payload).await?;
    if !same(want.as_bytes(), got.as_bytes()) {
        return Err(invalid());
    }
    let p: Payload = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|json| serde_json::from_slice(&json).ok())
        .ok_or_else(invalid)?;
    if p.p != project_id {
        return Err(ApiError::bad_request(
            "cursor belongs to another project's listing: list from the start without one",
        ));
    }
    Ok(ListPos {
        created_at: p.c,
        session_id: p.s,
    })
}

/// Equality in time independent of where the inputs differ (MACs are compared).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::StaticSigner;
    use wallcrawler_contract::SigningKey;

    fn pos() -> ListPos {
        ListPos {
            created_at: "2026-01-01T00:00:00.000Z".into(),
            session_id: "sess_1".into(),
        }
    }

    #[tokio::test]
    async fn a_cursor_opens_only_unaltered_for_its_project_and_key() {
        let signer = StaticSigner(SigningKey::from_seed(&[1; 32]));
        let c = seal(&signer, "proj_a", &pos()).await.unwrap();
        assert_eq!(open(&signer, "proj_a", &c).await.unwrap(), pos());

        let foreign = open(&signer, "proj_b", &c).await.unwrap_err();
        assert_eq!(foreign.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(
            foreign.message.contains("another project"),
            "{}",
            foreign.message
        );

        // A payload rewritten to name another project (or any other change) fails the MAC.
        let forged = URL_SAFE_NO_PAD.encode(br#"{"p":"proj_b","c":"","s":""}"#);
        let mac = c.split_once('.').unwrap().1;
        let other_key = StaticSigner(SigningKey::from_seed(&[2; 32]));
        for bad in [
            format!("{forged}.{mac}"),
            c.replacen('.', "x.", 1),
            format!("{c}x"),
            "nodot".to_owned(),
            String::new(),
            "a".repeat(MAX_LEN + 1),
        ] {
            let e = open(&signer, "proj_b", &bad).await.unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(
                e.message.starts_with("cursor is not valid"),
                "{}",
                e.message
            );
        }
        assert!(open(&other_key, "proj_a", &c).await.is_err(), "another key");
    }
}
