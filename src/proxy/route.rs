//! Which route a request is for: pure, so every path rule is unit-tested.

use crate::upstream::is_target_id;

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
    /// `GET /viewer`: the live viewer's page (credential in `?t=`).
    Viewer,
    /// WebSocket upgrade on `/viewer/ws`: the live viewer's frames and input.
    ViewerSocket,
}

impl Route {
    /// Whether the route is answered by upgrading to a WebSocket.
    pub fn is_websocket(&self) -> bool {
        matches!(
            self,
            Route::BrowserRoot | Route::Devtools(_) | Route::ViewerSocket
        )
    }

    /// Whether the route takes the viewer credential rather than the session token.
    pub fn is_viewer(&self) -> bool {
        matches!(self, Route::Viewer | Route::ViewerSocket)
    }
}

/// Why no route matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// No route for this path (answered 404).
    NotFound,
    /// The path exists, but not for this method (answered 405).
    MethodNotAllowed,
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
        "/viewer" => Route::Viewer,
        "/viewer/ws" => Route::ViewerSocket,
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
        let pass = |p: &str| Ok(Route::JsonPassthrough(p.into()));
        let devtools = |p: &str| Ok(Route::Devtools(p.into()));
        let cases = [
            ("GET", "/health", false, Ok(Route::Health)),
            ("GET", "/", true, Ok(Route::BrowserRoot)),
            ("GET", "/", false, Err(RouteError::NotFound)),
            ("GET", "/json/version", false, Ok(Route::JsonVersion)),
            ("GET", "/json/version/", false, Ok(Route::JsonVersion)),
            ("GET", "/json", false, Ok(Route::JsonList)),
            ("GET", "/json/", false, Ok(Route::JsonList)),
            ("GET", "/json/list/", false, Ok(Route::JsonList)),
            ("PUT", "/json/new", false, Ok(Route::JsonNew)),
            (
                "POST",
                "/json/new",
                false,
                Err(RouteError::MethodNotAllowed),
            ),
            ("GET", "/json/protocol", false, pass("/json/protocol")),
            ("GET", "/viewer", false, Ok(Route::Viewer)),
            ("GET", "/viewer/", false, Ok(Route::Viewer)),
            ("GET", "/viewer/ws", true, Ok(Route::ViewerSocket)),
            ("POST", "/viewer", false, Err(RouteError::MethodNotAllowed)),
            (
                "GET",
                "/json/activate/ABC",
                false,
                pass("/json/activate/ABC"),
            ),
            ("GET", "/json/close/ABC/", false, pass("/json/close/ABC")),
            (
                "GET",
                "/devtools/page/ABC-1",
                true,
                devtools("/devtools/page/ABC-1"),
            ),
            (
                "GET",
                "/devtools/browser/1f2e",
                true,
                devtools("/devtools/browser/1f2e"),
            ),
            (
                "POST",
                "/json/version",
                false,
                Err(RouteError::MethodNotAllowed),
            ),
        ];
        for (method, path, upgrade, want) in cases {
            assert_eq!(route(method, path, upgrade), want, "{method} {path}");
        }
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
            "/viewer/x",
            "/viewer/ws/x",
        ] {
            assert_eq!(route("GET", p, true), Err(RouteError::NotFound), "{p}");
        }
    }
}
