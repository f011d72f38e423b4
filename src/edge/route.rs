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
    /// `GET /inspector/<credential>/<file>`: Chrome's DevTools frontend file `/devtools/<file>`
    /// (the viewer credential rides in the path: the frontend loads its modules by relative
    /// URL, which a query would not reach).
    InspectorFile {
        /// The live-view credential (never logged).
        credential: String,
        /// The file's path under `/devtools/`, [`is_frontend_file`].
        file: String,
    },
    /// WebSocket upgrade on `/inspector/<credential>/page/<id>`: the inspector's CDP socket,
    /// relayed as `/devtools/page/<id>`.
    InspectorPage {
        /// The live-view credential (never logged).
        credential: String,
        /// The page's target id.
        page: String,
    },
}

impl Route {
    /// Whether the route is answered by upgrading to a WebSocket.
    pub fn is_websocket(&self) -> bool {
        matches!(
            self,
            Route::BrowserRoot
                | Route::Devtools(_)
                | Route::ViewerSocket
                | Route::InspectorPage { .. }
        )
    }

    /// The viewer credential a route carries in its path (the inspector's).
    pub fn path_credential(&self) -> Option<&str> {
        match self {
            Route::InspectorFile { credential, .. } | Route::InspectorPage { credential, .. } => {
                Some(credential)
            }
            _ => None,
        }
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
            if let Some(rest) = p.strip_prefix("/inspector/") {
                return inspector(method, rest, upgrade);
            }
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

/// Longest viewer credential accepted in an inspector path.
pub const MAX_PATH_CREDENTIAL: usize = 4096;
/// Longest DevTools frontend file path accepted.
pub const MAX_FRONTEND_FILE: usize = 256;

/// `/inspector/<credential>/<rest>` (`rest` given): `page/<id>` with an upgrade is the CDP
/// socket, anything else a frontend file.
fn inspector(method: &str, rest: &str, upgrade: bool) -> Result<Route, RouteError> {
    let Some((credential, tail)) = rest.split_once('/') else {
        return Err(RouteError::NotFound);
    };
    let credential_ok = !credential.is_empty()
        && credential.len() <= MAX_PATH_CREDENTIAL
        && credential
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !credential_ok {
        return Err(RouteError::NotFound);
    }
    let credential = credential.to_owned();
    let r = match tail.strip_prefix("page/") {
        Some(id) if upgrade && is_target_id(id) => Route::InspectorPage {
            credential,
            page: id.to_owned(),
        },
        Some(_) => return Err(RouteError::NotFound),
        None if is_frontend_file(tail) => Route::InspectorFile {
            credential,
            file: tail.to_owned(),
        },
        None => return Err(RouteError::NotFound),
    };
    if method != "GET" {
        return Err(RouteError::MethodNotAllowed);
    }
    Ok(r)
}

/// A DevTools frontend file path: `[A-Za-z0-9._/-]`, at most [`MAX_FRONTEND_FILE`] bytes, no
/// empty, `.` or `..` segment (so nothing but a file under `/devtools/` on Chrome).
pub fn is_frontend_file(file: &str) -> bool {
    !file.is_empty()
        && file.len() <= MAX_FRONTEND_FILE
        && !file.contains("..")
        && file
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        && file.split('/').all(|s| !s.is_empty() && s != ".")
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
    fn inspector_routes() {
        let file = |f: &str| {
            Ok(Route::InspectorFile {
                credential: "a.b-c_d".into(),
                file: f.into(),
            })
        };
        assert_eq!(
            route("GET", "/inspector/a.b-c_d/inspector.html", false),
            file("inspector.html")
        );
        assert_eq!(
            route(
                "GET",
                "/inspector/a.b-c_d/entrypoints/inspector/inspector.js",
                false
            ),
            file("entrypoints/inspector/inspector.js")
        );
        assert_eq!(
            route("GET", "/inspector/a.b-c_d/page/ABC-1", true),
            Ok(Route::InspectorPage {
                credential: "a.b-c_d".into(),
                page: "ABC-1".into()
            })
        );
        assert_eq!(
            route("POST", "/inspector/a.b-c_d/inspector.html", false),
            Err(RouteError::MethodNotAllowed)
        );
        let long_file = format!("/inspector/c/{}", "a".repeat(MAX_FRONTEND_FILE + 1));
        let long_credential = format!("/inspector/{}/x.js", "a".repeat(MAX_PATH_CREDENTIAL + 1));
        for p in [
            "/inspector/c/../../etc/passwd",
            "/inspector/c/a/../b.js",
            "/inspector/c/a/..",
            "/inspector/c/./a.js",
            "/inspector/c/a//b.js",
            "/inspector/c/a%2F..%2Fb",
            "/inspector/c/a b.js",
            "/inspector/c/",
            "/inspector/c",
            "/inspector//inspector.html",
            "/inspector/c%2E/inspector.html",
            "/inspector/c/page/ABC-1",
            "/inspector/c/page/../x",
            long_file.as_str(),
            long_credential.as_str(),
        ] {
            assert_eq!(route("GET", p, false), Err(RouteError::NotFound), "{p}");
        }
        assert_eq!(
            route("GET", "/inspector/c/page/a/b", true),
            Err(RouteError::NotFound)
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
            "/viewer/x",
            "/viewer/ws/x",
        ] {
            assert_eq!(route("GET", p, true), Err(RouteError::NotFound), "{p}");
        }
    }
}
