//! The DynamoDB tables as deploy/template.yaml declares them (keys, attribute types, global
//! secondary indexes with their projections), created in moto under unique names. A unit test
//! below holds these declarations to the template's text.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};

use crate::unique;

/// A table of the template.
pub struct Table {
    /// The API function's variable that names it.
    pub var: &'static str,
    /// The template's name suffix (`${NamePrefix}-<suffix>`), here the unique name's prefix.
    pub suffix: &'static str,
    /// The attributes of its key and indexes, with their types (`S` or `N`).
    pub attributes: &'static [(&'static str, &'static str)],
    /// Its partition key.
    pub key: &'static str,
    /// Its sort key, if any.
    pub sort: Option<&'static str>,
    /// Its global secondary indexes.
    pub indexes: &'static [Index],
}

/// A global secondary index.
pub struct Index {
    /// Its name.
    pub name: &'static str,
    /// Its partition key and, if any, its sort key.
    pub keys: (&'static str, Option<&'static str>),
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection: &'static str,
    /// With `INCLUDE`, the attributes projected besides the keys.
    pub include: &'static [&'static str],
}

/// The sessions table.
pub const SESSIONS: Table = Table {
    var: "SESSIONS_TABLE_NAME",
    suffix: "sessions",
    attributes: &[
        ("sessionId", "S"),
        ("projectId", "S"),
        ("createdAt", "S"),
        ("status", "S"),
        ("expiresAt", "N"),
        ("ecsTaskArn", "S"),
        ("contextId", "S"),
    ],
    key: "sessionId",
    sort: None,
    indexes: &[
        Index {
            name: "projectId-createdAt-index",
            keys: ("projectId", Some("createdAt")),
            projection: "INCLUDE",
            // What listing shows: never the token.
            include: &wallcrawler_contract::session::attr::LISTED,
        },
        Index {
            name: "status-expiresAt-index",
            keys: ("status", Some("expiresAt")),
            projection: "KEYS_ONLY",
            include: &[],
        },
        Index {
            name: "ecsTaskArn-index",
            keys: ("ecsTaskArn", None),
            projection: "KEYS_ONLY",
            include: &[],
        },
        Index {
            name: "contextId-index",
            keys: ("contextId", None),
            projection: "INCLUDE",
            // Enough to pass over ended sessions; never the token.
            include: &["endedAt"],
        },
    ],
};

/// The projects table.
pub const PROJECTS: Table = Table {
    var: "PROJECTS_TABLE_NAME",
    suffix: "projects",
    attributes: &[("projectId", "S")],
    key: "projectId",
    sort: None,
    indexes: &[],
};

/// The API keys table (SHA-256 hashes of the keys).
pub const API_KEYS: Table = Table {
    var: "API_KEYS_TABLE_NAME",
    suffix: "api-keys",
    attributes: &[("apiKeyHash", "S"), ("projectId", "S")],
    key: "apiKeyHash",
    sort: None,
    indexes: &[Index {
        name: "projectId-index",
        keys: ("projectId", None),
        projection: "ALL",
        include: &[],
    }],
};

/// The contexts table.
pub const CONTEXTS: Table = Table {
    var: "CONTEXTS_TABLE_NAME",
    suffix: "contexts",
    attributes: &[("contextId", "S")],
    key: "contextId",
    sort: None,
    indexes: &[],
};

/// The projects' concurrency slots: per project a counter item and one item per held slot.
pub const SLOTS: Table = Table {
    var: "SLOTS_TABLE_NAME",
    suffix: "slots",
    attributes: &[("projectId", "S"), ("sessionId", "S")],
    key: "projectId",
    sort: Some("sessionId"),
    indexes: &[],
};

/// The tasks table of the task API: one item per task that has taken a session. Not in
/// [`ALL`]: its variable turns the task API on (with two more), so only the task API's tests
/// create it. Held to the template's text like the others.
pub const TASKS: Table = Table {
    var: "TASKS_TABLE_NAME",
    suffix: "tasks",
    attributes: &[("taskId", "S")],
    key: "taskId",
    sort: None,
    indexes: &[],
};

/// Every table of the template.
pub const ALL: [&Table; 5] = [&SESSIONS, &PROJECTS, &API_KEYS, &CONTEXTS, &SLOTS];

fn schema(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .expect("name and type set")
}

fn index(i: &Index) -> GlobalSecondaryIndex {
    let mut keys = vec![schema(i.keys.0, KeyType::Hash)];
    keys.extend(i.keys.1.map(|r| schema(r, KeyType::Range)));
    GlobalSecondaryIndex::builder()
        .index_name(i.name)
        .set_key_schema(Some(keys))
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::from(i.projection))
                .set_non_key_attributes(
                    (!i.include.is_empty())
                        .then(|| i.include.iter().map(|a| (*a).to_owned()).collect()),
                )
                .build(),
        )
        .build()
        .expect("name, keys and projection set")
}

/// Creates `table` in moto under a unique name; returns the name.
pub async fn create(sdk: &SdkConfig, table: &Table) -> String {
    let name = unique(table.suffix);
    let mut req = aws_sdk_dynamodb::Client::new(sdk)
        .create_table()
        .table_name(&name)
        .set_key_schema(Some(
            std::iter::once(schema(table.key, KeyType::Hash))
                .chain(table.sort.map(|r| schema(r, KeyType::Range)))
                .collect(),
        ))
        .billing_mode(BillingMode::PayPerRequest);
    for (attribute, kind) in table.attributes {
        req = req.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(*attribute)
                .attribute_type(ScalarAttributeType::from(*kind))
                .build()
                .expect("name and type set"),
        );
    }
    for i in table.indexes {
        req = req.global_secondary_indexes(index(i));
    }
    req.send().await.expect("moto creates the table");
    name
}

/// Every table under unique names: the `*_TABLE_NAME` variables naming them.
pub async fn create_all(sdk: &SdkConfig) -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    for table in ALL {
        vars.push((table.var, create(sdk, table).await));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template's properties of the table named `<prefix>-<suffix>`: its lines up to the
    /// next blank one.
    fn declared(template: &str, suffix: &str) -> Vec<String> {
        let name = format!("TableName: !Sub \"${{NamePrefix}}-{suffix}\"");
        template
            .lines()
            .skip_while(|l| l.trim() != name)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_owned())
            .collect()
    }

    #[test]
    fn the_tables_are_the_templates() {
        let template =
            std::fs::read_to_string(crate::repo_root().join("deploy/template.yaml")).unwrap();
        for table in ALL.into_iter().chain([&TASKS]) {
            let lines = declared(&template, table.suffix);
            assert!(
                !lines.is_empty(),
                "no table {} in the template",
                table.suffix
            );
            let has = |l: String| assert!(lines.contains(&l), "{}: no `{l}`", table.suffix);
            for (a, t) in table.attributes {
                has(format!("- {{ AttributeName: {a}, AttributeType: {t} }}"));
            }
            has(format!(
                "- {{ AttributeName: {}, KeyType: HASH }}",
                table.key
            ));
            if let Some(r) = table.sort {
                has(format!("- {{ AttributeName: {r}, KeyType: RANGE }}"));
            }
            for i in table.indexes {
                has(format!("- IndexName: {}", i.name));
                has(format!(
                    "- {{ AttributeName: {}, KeyType: HASH }}",
                    i.keys.0
                ));
                if let Some(r) = i.keys.1 {
                    has(format!("- {{ AttributeName: {r}, KeyType: RANGE }}"));
                }
                if i.include.is_empty() {
                    has(format!(
                        "Projection: {{ ProjectionType: {} }}",
                        i.projection
                    ));
                } else {
                    has(format!(
                        "Projection: {{ ProjectionType: {}, NonKeyAttributes: [{}] }}",
                        i.projection,
                        i.include.join(", ")
                    ));
                }
            }
            let count = |needle: &str| lines.iter().filter(|l| l.contains(needle)).count();
            assert_eq!(
                count("AttributeType:"),
                table.attributes.len(),
                "{}",
                table.suffix
            );
            assert_eq!(count("IndexName:"), table.indexes.len(), "{}", table.suffix);
        }
    }

    #[tokio::test]
    async fn moto_creates_every_table() {
        let sdk = crate::sdk_config().await;
        let vars = create_all(&sdk).await;
        let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
        for (table, (_, name)) in ALL.iter().zip(&vars) {
            let d = dynamo
                .describe_table()
                .table_name(name)
                .send()
                .await
                .unwrap();
            let got = d.table().unwrap().global_secondary_indexes().len();
            assert_eq!(got, table.indexes.len(), "{name}");
        }
    }
}
