//! `userMetadata`, the client's free-form JSON object on a session: the bounds a create is held
//! to ([`check`]) and Browserbase's metadata query, the `q` of `GET /v1/sessions`
//! ([`MetadataQuery`]).
//!
//! Bounds: the object serialized as compact JSON is at most [`MAX_CHARS`] characters (UTF-16
//! units, as JavaScript's `JSON.stringify(o).length` counts them: Browserbase's limit, measured
//! its way), nested at most [`MAX_DEPTH`] levels (DynamoDB stores the object as nested maps and
//! refuses more than 32 levels; 16 keeps a margin, and no 512-character object needs more).
//!
//! The query: `user_metadata['path']['to']['field']:'value'` — the only base Browserbase has,
//! one or more path segments, and a value compared for string equality (no arrays, no numbers
//! or booleans: clients store those as strings). Inside quotes `\'` is a quote and `\\` a
//! backslash; nothing else is escaped, and no spaces are allowed between the parts. A session
//! matches when following the path through its metadata's objects ends at a string equal to
//! the value.

use serde_json::Value;

/// The longest `userMetadata`, in UTF-16 units of its compact JSON (Browserbase's limit).
pub const MAX_CHARS: usize = 512;
/// The deepest nesting of `userMetadata` (the object itself is level 1).
pub const MAX_DEPTH: usize = 16;
/// The longest `q`, in characters: enough for any path and value a [`MAX_CHARS`] object holds.
pub const MAX_QUERY_CHARS: usize = 1024;

/// The form a query must have, for error messages.
pub const QUERY_FORM: &str = "user_metadata['path']['to']['field']:'value'";

/// Why `userMetadata` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Not a JSON object.
    #[error("userMetadata must be a JSON object")]
    NotObject,
    /// Over [`MAX_CHARS`].
    #[error(
        "userMetadata must be at most {MAX_CHARS} characters as JSON (JSON.stringify), got more"
    )]
    TooLong,
    /// Over [`MAX_DEPTH`].
    #[error("userMetadata must be nested at most {MAX_DEPTH} levels deep")]
    TooDeep,
}

/// Checks `v` against the bounds in the module doc. Costs time in proportion to the bound, not
/// to `v`: serialization stops once past it.
pub fn check(v: &Value) -> Result<(), MetadataError> {
    if !v.is_object() {
        return Err(MetadataError::NotObject);
    }
    if depth_over(v, MAX_DEPTH) {
        return Err(MetadataError::TooDeep);
    }
    // A UTF-16 unit is at most 3 bytes of UTF-8 (a 4-byte character is 2 units): a text of
    // more bytes than this is over the limit whatever it holds.
    let mut out = Bounded {
        buf: Vec::new(),
        cap: MAX_CHARS * 3,
    };
    serde_json::to_writer(&mut out, v).map_err(|_| MetadataError::TooLong)?;
    let text = String::from_utf8_lossy(&out.buf);
    if text.encode_utf16().count() > MAX_CHARS {
        return Err(MetadataError::TooLong);
    }
    Ok(())
}

/// Whether `v` nests deeper than `max` levels (objects and arrays alike). Iterative, with its
/// own stack: a deep value never costs recursion.
fn depth_over(v: &Value, max: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(v, 1)];
    while let Some((v, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(m) => Box::new(m.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        if level > max {
            return true;
        }
        stack.extend(children.map(|c| (c, level + 1)));
    }
    false
}

/// A writer that refuses to grow past `cap` bytes.
struct Bounded {
    buf: Vec<u8>,
    cap: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.cap {
            return Err(std::io::Error::other("over the bound"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A parsed `q`: the path into the metadata and the string it must end at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataQuery {
    /// The keys to follow, outermost first (at least one).
    pub path: Vec<String>,
    /// The value the path must end at.
    pub value: String,
}

/// Why a `q` was refused; says where, never echoes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Over [`MAX_QUERY_CHARS`].
    #[error("q must be at most {MAX_QUERY_CHARS} characters")]
    TooLong,
    /// Over [`MAX_DEPTH`] path segments (no metadata is that deep).
    #[error("q's path must have at most {MAX_DEPTH} segments")]
    TooDeep,
    /// Not of the form; the 1-based character position and what was expected there.
    #[error("q must have the form {QUERY_FORM}: expected {expected} at character {at}")]
    Malformed {
        /// 1-based character position.
        at: usize,
        /// What the grammar wanted there.
        expected: &'static str,
    },
}

/// A cursor over the query's characters.
///
/// Hand-written rather than a parser crate: the grammar is four tokens, and `nom` is in the
/// lock file only as a build dependency of the TLS stack's bindings.
struct Scan<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    at: usize,
}

impl Scan<'_> {
    fn malformed(&self, expected: &'static str) -> QueryError {
        QueryError::Malformed {
            at: self.at + 1,
            expected,
        }
    }

    fn next(&mut self) -> Option<char> {
        let c = self.chars.next();
        self.at += usize::from(c.is_some());
        c
    }

    fn expect(&mut self, want: char, expected: &'static str) -> Result<(), QueryError> {
        if self.chars.peek() == Some(&want) {
            self.next();
            Ok(())
        } else {
            Err(self.malformed(expected))
        }
    }

    /// `'…'` with `\'` and `\\` escaped.
    fn quoted(&mut self) -> Result<String, QueryError> {
        self.expect('\'', "an opening quote (')")?;
        let mut out = String::new();
        loop {
            match self.next() {
                Some('\'') => return Ok(out),
                Some('\\') => match self.chars.peek() {
                    Some(&c @ ('\'' | '\\')) => {
                        self.next();
                        out.push(c);
                    }
                    _ => return Err(self.malformed("\\' or \\\\ after a backslash")),
                },
                Some(c) => out.push(c),
                None => return Err(self.malformed("a closing quote (')")),
            }
        }
    }
}

impl MetadataQuery {
    /// Parses `q` strictly (see the module doc).
    pub fn parse(q: &str) -> Result<Self, QueryError> {
        if q.chars().count() > MAX_QUERY_CHARS {
            return Err(QueryError::TooLong);
        }
        let mut s = Scan {
            chars: q.chars().peekable(),
            at: 0,
        };
        for want in "user_metadata".chars() {
            s.expect(want, "the base user_metadata")?;
        }
        let mut path = Vec::new();
        while s.chars.peek() == Some(&'[') {
            s.next();
            path.push(s.quoted()?);
            s.expect(']', "a closing bracket (])")?;
            if path.len() > MAX_DEPTH {
                return Err(QueryError::TooDeep);
            }
        }
        if path.is_empty() {
            return Err(s.malformed("a path segment (['field'])"));
        }
        s.expect(':', "a colon (:) or another path segment")?;
        let value = s.quoted()?;
        if s.chars.peek().is_some() {
            return Err(s.malformed("the end of the query"));
        }
        Ok(Self { path, value })
    }

    /// Whether a session with this `userMetadata` matches.
    pub fn matches(&self, metadata: Option<&Value>) -> bool {
        let mut at = metadata;
        for key in &self.path {
            at = at.and_then(Value::as_object).and_then(|m| m.get(key));
        }
        at.and_then(Value::as_str) == Some(self.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(path: &[&str], value: &str) -> MetadataQuery {
        MetadataQuery {
            path: path.iter().map(|s| (*s).to_owned()).collect(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn parses_browserbase_examples() {
        assert_eq!(
            MetadataQuery::parse("user_metadata['order']['status']:'shipped'"),
            Ok(q(&["order", "status"], "shipped"))
        );
        assert_eq!(
            MetadataQuery::parse("user_metadata['env']:'staging'"),
            Ok(q(&["env"], "staging"))
        );
        assert_eq!(
            MetadataQuery::parse(r"user_metadata['it\'s']['a\\b']:''"),
            Ok(q(&["it's", r"a\b"], ""))
        );
        assert_eq!(
            MetadataQuery::parse("user_metadata['k:]']:'a:b][c'"),
            Ok(q(&["k:]"], "a:b][c"))
        );
    }

    #[test]
    fn refuses_what_is_not_of_the_form_saying_where() {
        let bad = |s: &str, at: usize| match MetadataQuery::parse(s) {
            Err(QueryError::Malformed { at: got, .. }) => assert_eq!(got, at, "{s}"),
            other => panic!("{s}: {other:?}"),
        };
        bad("", 1);
        bad("env:'staging'", 1);
        bad("user_metadata", 14);
        bad("user_metadata:'x'", 14);
        bad("user_metadata['env']", 21);
        bad("user_metadata['env']:staging", 22);
        bad("user_metadata['env']:'staging", 30);
        bad("user_metadata['env']:'staging' ", 31);
        bad("user_metadata[env]:'x'", 15);
        bad("user_metadata['env'] :'x'", 21);
        bad("user_metadata[\"env\"]:'x'", 15);
        bad(r"user_metadata['e\nv']:'x'", 18);
        bad("session['env']:'x'", 1);
    }

    #[test]
    fn bounds_length_and_depth() {
        let long = format!("user_metadata['k']:'{}'", "v".repeat(MAX_QUERY_CHARS));
        assert_eq!(MetadataQuery::parse(&long), Err(QueryError::TooLong));
        let deep = format!("user_metadata{}:'v'", "['k']".repeat(MAX_DEPTH + 1));
        assert_eq!(MetadataQuery::parse(&deep), Err(QueryError::TooDeep));
        let deepest = format!("user_metadata{}:'v'", "['k']".repeat(MAX_DEPTH));
        assert!(MetadataQuery::parse(&deepest).is_ok());
    }

    #[test]
    fn matches_string_equality_at_the_path_only() {
        let m = json!({"order": {"status": "shipped", "n": 1, "ok": true, "tags": ["shipped"]}});
        let m = Some(&m);
        assert!(q(&["order", "status"], "shipped").matches(m));
        assert!(!q(&["order", "status"], "Shipped").matches(m));
        assert!(!q(&["order"], "shipped").matches(m));
        assert!(
            !q(&["order", "n"], "1").matches(m),
            "numbers are not strings"
        );
        assert!(!q(&["order", "ok"], "true").matches(m));
        assert!(!q(&["order", "tags"], "shipped").matches(m), "no arrays");
        assert!(!q(&["order", "status", "x"], "shipped").matches(m));
        assert!(!q(&["status"], "shipped").matches(m));
        assert!(!q(&["order", "status"], "shipped").matches(None));
    }

    #[test]
    fn metadata_at_the_limit_passes_and_one_more_character_does_not() {
        // {"k":"…"} is 8 characters besides the value.
        let at = json!({ "k": "v".repeat(MAX_CHARS - 8) });
        assert_eq!(serde_json::to_string(&at).unwrap().len(), MAX_CHARS);
        assert_eq!(check(&at), Ok(()));
        let over = json!({ "k": "v".repeat(MAX_CHARS - 7) });
        assert_eq!(check(&over), Err(MetadataError::TooLong));
        // Counted in UTF-16 units, as JSON.stringify(o).length: "é" is one, "😀" two.
        assert_eq!(check(&json!({ "k": "é".repeat(MAX_CHARS - 8) })), Ok(()));
        let emoji = json!({ "k": "😀".repeat((MAX_CHARS - 8) / 2) });
        assert_eq!(check(&emoji), Ok(()));
        let emoji = json!({ "k": "😀".repeat((MAX_CHARS - 8) / 2 + 1) });
        assert_eq!(check(&emoji), Err(MetadataError::TooLong));
        let huge = json!({ "k": "v".repeat(1 << 20) });
        assert_eq!(check(&huge), Err(MetadataError::TooLong));
    }

    #[test]
    fn metadata_must_be_a_shallow_enough_object() {
        assert_eq!(check(&json!("x")), Err(MetadataError::NotObject));
        assert_eq!(check(&json!([1])), Err(MetadataError::NotObject));
        let mut deep = json!({});
        for _ in 1..MAX_DEPTH {
            deep = json!({ "a": deep });
        }
        assert_eq!(check(&deep), Ok(()));
        assert_eq!(check(&json!({ "a": deep })), Err(MetadataError::TooDeep));
        assert_eq!(check(&json!({ "a": [deep] })), Err(MetadataError::TooDeep));
    }
}
