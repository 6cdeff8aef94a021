//! Errors of `monitor simulate`: every one names the file and, where there is one, the field.
use serde::de::DeserializeOwned;

/// Why a simulation could not run. Display gives `FILE: FIELD: what is wrong`.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Malformed JSON/YAML or a field with a bad value. `field` is the path inside the
    /// document (`steps[2].summary.node.memory.availableBytes`), empty for the document.
    #[error("{file}: {}{message}", field_prefix(field))]
    Input {
        file: String,
        field: String,
        message: String,
    },
    /// The kubelet configuration was rejected (its message names origin, key and value).
    #[error("{0}")]
    Config(String),
    /// The pod list was rejected (its message names origin and field path).
    #[error("{0}")]
    Pods(String),
    /// The command line does not describe a simulation.
    #[error("{0}")]
    Usage(String),
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

impl SimulateError {
    pub(crate) fn input(file: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        SimulateError::Input {
            file: file.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Joins a field path prefix and a path inside a value (`steps[1].summary` + `node.fs`).
pub(crate) fn join_field(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner.is_empty() || inner == ".") {
        (_, true) => prefix.to_string(),
        (true, false) => inner.to_string(),
        (false, false) if inner.starts_with('[') => format!("{prefix}{inner}"),
        (false, false) => format!("{prefix}.{inner}"),
    }
}

/// Whether a document is JSON (so serde_json, with its line/column messages, parses it);
/// anything else is read as YAML.
fn looks_like_json(text: &str) -> bool {
    matches!(
        text.trim_start().as_bytes().first(),
        Some(b'{') | Some(b'[')
    )
}

/// Deserializes a JSON or YAML document, naming the field path of the first error.
pub fn deserialize_document<T: DeserializeOwned>(
    text: &str,
    file: &str,
    prefix: &str,
) -> Result<T, SimulateError> {
    if looks_like_json(text) {
        let mut de = serde_json::Deserializer::from_str(text);
        let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            // A syntax error is malformed JSON; a data error is a bad value in good JSON.
            let kind = match e.inner().classify() {
                serde_json::error::Category::Data => "invalid value",
                _ => "malformed JSON",
            };
            SimulateError::input(
                file,
                join_field(prefix, &e.path().to_string()),
                format!("{kind}: {}", e.inner()),
            )
        })?;
        de.end()
            .map_err(|e| SimulateError::input(file, prefix, format!("malformed JSON: {e}")))?;
        Ok(value)
    } else {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            SimulateError::input(
                file,
                join_field(prefix, &e.path().to_string()),
                format!("YAML: {}", e.inner()),
            )
        })
    }
}

/// Deserializes a value already parsed from a scenario file (an inline document).
pub(crate) fn deserialize_value<T: DeserializeOwned>(
    value: serde_yaml_ng::Value,
    file: &str,
    prefix: &str,
) -> Result<T, SimulateError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        SimulateError::input(
            file,
            join_field(prefix, &e.path().to_string()),
            e.inner().to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use rstest::rstest;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "fields exist to be deserialized")]
    struct Doc {
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[expect(dead_code, reason = "fields exist to be deserialized")]
    struct Item {
        size: u64,
    }

    #[rstest]
    #[case::json_type_error(
        r#"{"items": [{"size": 1}, {"size": "big"}]}"#,
        "x.json: items[1].size: invalid value"
    )]
    #[case::json_syntax_error(r#"{"items": [{"size": 1},"#, "x.json: items: malformed JSON")]
    #[case::json_trailing_garbage(r#"{"items": []} }"#, "x.json: malformed JSON")]
    #[case::yaml_type_error("items:\n  - size: -3\n", "x.json: items[0].size: YAML")]
    #[case::yaml_syntax_error("items: [\n", "x.json: items: YAML")]
    fn document_errors_name_file_and_field(#[case] text: &str, #[case] expected_prefix: &str) {
        let err = deserialize_document::<Doc>(text, "x.json", "").expect_err("must be rejected");
        let message = err.to_string();
        assert!(
            message.starts_with(expected_prefix),
            "{message:?} should start with {expected_prefix:?}"
        );
    }

    #[rstest]
    #[case("steps[1].summary", "node.fs", "steps[1].summary.node.fs")]
    #[case("steps[1].pods", "[2].metadata", "steps[1].pods[2].metadata")]
    #[case("", "node", "node")]
    #[case("config", ".", "config")]
    fn field_paths_join(#[case] prefix: &str, #[case] inner: &str, #[case] joined: &str) {
        assert_eq!(join_field(prefix, inner), joined);
    }
}
