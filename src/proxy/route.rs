//! Which route a request is for: pure, so every path rule is unit-tested.

/// The proxy's routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /health`, no auth.
    Health,
    /// WebSocket upgrade on `/`: Chrome's browser target.
    BrowserRoot,
    /// WebSocket upgrade on `/devtools/browser/<id>` or `/devtools/page/<id>`: the same path on Chrome.
    Devtools(String),
    /// `GET /json/version` (rewritten).
    JsonVersion,
    /// `GET /json`, `/json/list` (rewritten).
    JsonList,
    /// `PUT /json/new?<url>`: raw query passed through; credential from the header only.
    JsonNew,
    /// `/json/activate/<id>`, `/json/close/<id>`, `/json/protocol`: passed through.
    JsonPassthrough(String),
}

/// Why no route matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No route for this path (answered 404).
    NotFound,
    /// The path exists, but not for this method (answered 405).
    MethodNotAllowed,
}

fn is_target_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && id != "."
        && id != ".."
}

/// Routes `method` + `path` (query removed). `upgrade` says whether the request asks for a
/// WebSocket upgrade.
pub fn route(method: &str, path: &str, upgrade: bool) -> Result<Route, RouteError> {
    let trimmed = if path.len() > 1 {
        path.strip_suffix('/').unwrap_or(path)
    } else {
        path
    };
    let r = match trimmed {
        "/health" => Route::Health,
        "/" => {
            return if upgrade && method == "GET" {
                Ok(Route::BrowserRoot)
            } else if method == "GET" {
                Err(RouteError::NotFound)
            } else {
                Err(RouteError::MethodNotAllowed)
            };
        }
        "/json/version" => Route::JsonVersion,
        "/json" | "/json/list" => Route::JsonList,
        "/json/new" => {
            return match method {
                "PUT" | "GET" => Ok(Route::JsonNew),
                _ => Err(RouteError::MethodNotAllowed),
            };
        }
        "/json/protocol" => Route::JsonPassthrough(trimmed.to_owned()),
        p => {
            if let Some(id) = p
                .strip_prefix("/devtools/browser/")
                .or_else(|| p.strip_prefix("/devtools/page/"))
            {
                if !is_target_id(id) {
                    return Err(RouteError::NotFound);
                }
                if method != "GET" {
                    return Err(RouteError::MethodNotAllowed);
                }
                return Ok(Route::Devtools(p.to_owned()));
            }
            match p
                .strip_prefix("/json/activate/")
                .or_else(|| p.strip_prefix("/json/close/"))
            {
                Some(id) if is_target_id(id) => Route::JsonPassthrough(p.to_owned()),
                _ => return Err(RouteError::NotFound),
            }
        }
    };
    if method != "GET" {
        return Err(RouteError::MethodNotAllowed);
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/health", false), Ok(Route::Health));
        assert_eq!(route("GET", "/", true), Ok(Route::BrowserRoot));
        assert_eq!(route("GET", "/", false), Err(RouteError::NotFound));
        assert_eq!(route("GET", "/json/version", false), Ok(Route::JsonVersion));
        assert_eq!(
            route("GET", "/json/version/", false),
            Ok(Route::JsonVersion)
        );
        assert_eq!(route("GET", "/json", false), Ok(Route::JsonList));
        assert_eq!(route("GET", "/json/", false), Ok(Route::JsonList));
        assert_eq!(route("GET", "/json/list/", false), Ok(Route::JsonList));
        assert_eq!(route("PUT", "/json/new", false), Ok(Route::JsonNew));
        assert_eq!(
            route("POST", "/json/new", false),
            Err(RouteError::MethodNotAllowed)
        );
        assert_eq!(
            route("GET", "/json/protocol", false),
            Ok(Route::JsonPassthrough("/json/protocol".into()))
        );
        assert_eq!(
            route("GET", "/json/activate/ABC", false),
            Ok(Route::JsonPassthrough("/json/activate/ABC".into()))
        );
        assert_eq!(
            route("GET", "/json/close/ABC/", false),
            Ok(Route::JsonPassthrough("/json/close/ABC".into()))
        );
        assert_eq!(
            route("GET", "/devtools/page/ABC-1", true),
            Ok(Route::Devtools("/devtools/page/ABC-1".into()))
        );
        assert_eq!(
            route("GET", "/devtools/browser/1f2e", true),
            Ok(Route::Devtools("/devtools/browser/1f2e".into()))
        );
        assert_eq!(
            route("POST", "/json/version", false),
            Err(RouteError::MethodNotAllowed)
        );
    }

    #[test]
    fn hostile_paths_do_not_route() {
        for p in [
            "/devtools/page/../../etc",
            "/devtools/page/",
            "/devtools/page/a/b",
            "/devtools/page/..",
            "/json/activate/",
            "/json/close/a%2F..",
            "/metrics",
            "/json/version/x",
        ] {
            assert_eq!(route("GET", p, true), Err(RouteError::NotFound), "{p}");
        }
    }
}
