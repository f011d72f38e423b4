//! The one mapping between records and DynamoDB items, on `serde_dynamo`: a record's serde
//! names are the attribute names; strings are `S`, numbers `N`, booleans `BOOL`, sequences
//! `L`, maps and structs `M`, and `None` is `NULL` — so every optional field of a stored
//! record carries `skip_serializing_if = "Option::is_none"`, and absent stays absent. Sets
//! (`SS`, `NS`) read as lists. Integer fields read through [`wallcrawler_contract::whole`], so
//! a whole float another tool wrote (`"1700000000.0"`) reads back.
//!
//! Reading never panics on what the table holds: an attribute of a type the SDK does not know
//! (`AttributeValue::Unknown`, which `serde_dynamo`'s conversion does not handle) is refused
//! before `serde_dynamo` sees the item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A DynamoDB item, as the SDK holds it.
pub type Item = HashMap<String, AttributeValue>;

/// Why a record and an item did not map.
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    /// The record is not a map of attributes (a bug on our side).
    #[error("a {what} record cannot be written as an item: {source}")]
    Unwritable {
        /// The kind of record ("session").
        what: &'static str,
        /// serde_dynamo's reason.
        #[source]
        source: serde_dynamo::Error,
    },
    /// The item is not a record of this kind: a missing attribute or one of the wrong type.
    #[error("malformed {what} item: {source}")]
    Malformed {
        /// The kind of record ("session").
        what: &'static str,
        /// serde_dynamo's reason.
        #[source]
        source: serde_dynamo::Error,
    },
    /// An attribute (or a value inside it) has a type this SDK does not know.
    #[error("malformed {what} item: attribute {attribute:?} has a type this SDK does not know")]
    UnknownType {
        /// The kind of record ("session").
        what: &'static str,
        /// The item's top-level attribute holding it.
        attribute: String,
    },
}

/// `record` as an item; `what` names the kind of record in the error.
pub fn to_item<T: Serialize>(what: &'static str, record: &T) -> Result<Item, ItemError> {
    serde_dynamo::aws_sdk_dynamodb_1::to_item(record)
        .map_err(|source| ItemError::Unwritable { what, source })
}

/// `item` as a record; `what` names the kind of record in the error.
pub fn from_item<T: DeserializeOwned>(what: &'static str, item: &Item) -> Result<T, ItemError> {
    if let Some((attribute, _)) = item.iter().find(|(_, v)| !known(v)) {
        return Err(ItemError::UnknownType {
            what,
            attribute: attribute.clone(),
        });
    }
    serde_dynamo::aws_sdk_dynamodb_1::from_item(item.clone())
        .map_err(|source| ItemError::Malformed { what, source })
}

/// Whether `v` and every value inside it is of a type `serde_dynamo` converts (anything else
/// makes its conversion panic).
fn known(v: &AttributeValue) -> bool {
    match v {
        AttributeValue::M(m) => m.values().all(known),
        AttributeValue::L(l) => l.iter().all(known),
        AttributeValue::S(_)
        | AttributeValue::N(_)
        | AttributeValue::B(_)
        | AttributeValue::Bool(_)
        | AttributeValue::Null(_)
        | AttributeValue::Ss(_)
        | AttributeValue::Ns(_)
        | AttributeValue::Bs(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::primitives::Blob;
    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Record {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        meta: Option<Value>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "wallcrawler_contract::whole::optional"
        )]
        count: Option<u64>,
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    fn item(pairs: Vec<(&str, AttributeValue)>) -> Item {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    fn read(pairs: Vec<(&str, AttributeValue)>) -> Result<Record, ItemError> {
        from_item("test", &item(pairs))
    }

    #[test]
    fn absent_options_stay_absent_and_json_keeps_its_types() {
        let r = Record {
            id: "a".into(),
            note: None,
            tags: vec!["x".into()],
            meta: Some(json!({"n": 1, "f": 1.5, "l": [true, null, "s"]})),
            count: Some(3),
        };
        let i = to_item("test", &r).unwrap();
        assert!(!i.contains_key("note"), "absent stays absent, not NULL");
        assert_eq!(i["tags"], AttributeValue::L(vec![s("x")]));
        assert_eq!(i["count"], n("3"));
        let AttributeValue::M(meta) = &i["meta"] else {
            panic!("meta is a map: {:?}", i["meta"]);
        };
        assert_eq!(meta["n"], n("1"));
        assert_eq!(meta["f"], n("1.5"));
        assert_eq!(
            meta["l"],
            AttributeValue::L(vec![
                AttributeValue::Bool(true),
                AttributeValue::Null(true),
                s("s")
            ])
        );
        assert_eq!(from_item::<Record>("test", &i).unwrap(), r);
    }

    #[test]
    fn numbers_read_back_as_integers_when_whole() {
        // The four inputs the hand-written mapping was held to: whole numbers (an integer or a
        // whole float another tool wrote) read into integer fields, and any number reads into
        // a JSON value as that number.
        let count = |v: &str| read(vec![("id", s("a")), ("count", n(v))]).map(|r| r.count);
        assert_eq!(count("7").unwrap(), Some(7));
        assert_eq!(count("1700000000.0").unwrap(), Some(1_700_000_000));
        assert!(count("-2").is_err(), "not a count");
        assert!(count("1.5").is_err(), "not a whole number");
        let meta = |v: &str| read(vec![("id", s("a")), ("meta", n(v))]).unwrap().meta;
        assert_eq!(meta("7"), Some(Value::from(7u64)));
        assert_eq!(meta("-2"), Some(Value::from(-2i64)));
        assert_eq!(meta("1700000000.0"), Some(json!(1_700_000_000.0)));
        assert_eq!(meta("1.5"), Some(json!(1.5)));
    }

    #[test]
    fn sets_read_as_lists() {
        let r = read(vec![
            ("id", s("a")),
            ("tags", AttributeValue::Ss(vec!["p1".into(), "p2".into()])),
            ("meta", AttributeValue::Ns(vec!["1".into(), "2.5".into()])),
        ])
        .unwrap();
        assert_eq!(r.tags, ["p1", "p2"]);
        assert_eq!(r.meta, Some(json!([1, 2.5])));
    }

    #[test]
    fn null_reads_as_none_and_a_missing_required_attribute_is_malformed() {
        let r = read(vec![("id", s("a")), ("note", AttributeValue::Null(true))]).unwrap();
        assert_eq!(r.note, None);
        let e = read(vec![("note", s("x"))]).unwrap_err();
        assert!(matches!(e, ItemError::Malformed { .. }), "{e}");
        assert!(e.to_string().contains("malformed test item"), "{e}");
    }

    #[test]
    fn binary_where_a_string_is_expected_is_an_error_not_a_panic() {
        let e = read(vec![("id", AttributeValue::B(Blob::new(b"ab".to_vec())))]).unwrap_err();
        assert!(matches!(e, ItemError::Malformed { .. }), "{e}");
        let e = read(vec![("id", AttributeValue::Bs(vec![]))]).unwrap_err();
        assert!(matches!(e, ItemError::Malformed { .. }), "{e}");
        // Binary in a JSON tree, or beside the fields: an error or skipped, never a panic.
        let bin = AttributeValue::B(Blob::new(b"ab".to_vec()));
        assert!(read(vec![("id", s("a")), ("meta", bin.clone())]).is_err());
        assert!(read(vec![("id", s("a")), ("extra", bin)]).is_ok());
    }

    /// An item as the SDK parses it from `body` (a `GetItem` answer), served once by a
    /// stand-in DynamoDB on a loopback port: the only way to get `AttributeValue::Unknown`,
    /// which the SDK alone can build.
    async fn parsed(body: &'static str) -> Item {
        use std::io::{BufRead, BufReader, Read, Write};

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut r = BufReader::new(conn);
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            r.read_exact(&mut vec![0; len]).unwrap();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let mut conn = r.into_inner();
            conn.write_all(head.as_bytes()).unwrap();
            conn.write_all(body.as_bytes()).unwrap();
        });
        let conf = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .endpoint_url(url)
            .build();
        let out = aws_sdk_dynamodb::Client::from_conf(conf)
            .get_item()
            .table_name("t")
            .key("id", s("a"))
            .send()
            .await
            .unwrap();
        server.join().unwrap();
        out.item.unwrap()
    }

    #[tokio::test]
    async fn a_type_the_sdk_does_not_know_is_an_error_not_a_panic() {
        let i = parsed(r#"{"Item": {"id": {"S": "a"}, "note": {"Q": "?"}}}"#).await;
        assert!(i["note"].is_unknown(), "the SDK made it: {:?}", i["note"]);
        let e = from_item::<Record>("test", &i).unwrap_err();
        assert!(
            matches!(&e, ItemError::UnknownType { attribute, .. } if attribute == "note"),
            "{e}"
        );
        // Inside a map, and beside the fields (skipped through deserialize_any): guarded too.
        let i = parsed(r#"{"Item": {"id": {"S": "a"}, "x": {"M": {"y": {"Q": "?"}}}}}"#).await;
        assert!(matches!(
            from_item::<Record>("test", &i),
            Err(ItemError::UnknownType { .. })
        ));
    }
}
