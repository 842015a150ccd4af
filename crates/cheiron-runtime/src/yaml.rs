//! YAML in and out, in one place. Reading turns each document of a stream into JSON (a
//! [`serde_json::Value`]), the form the apiserver works with, under YAML 1.2's rules for plain
//! scalars (`yes`, `on` and `0755` stay strings); typed reading goes on from that value, so
//! `password: 918273645` is refused as an integer where a string is wanted. Writing gives
//! block-style YAML that reads like kubectl's, quoting what a YAML 1.1 reader would otherwise
//! take for another type.

use serde::Serialize;
use serde_json::Value;
use serde_saphyr::{
    Spanned, UserMessageFormatter,
    granit_parser::{Event, Parser},
};

/// Why an object did not serialise to YAML.
pub use serde_saphyr::SerializeError as WriteError;

/// Why a document is not YAML: the parser's message for a user, one line with its line and
/// column. It may quote the input; see [`crate::message::without_values`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReadError(String);

/// One document of a multi-document stream.
#[derive(Debug)]
pub struct Document {
    /// Its place in the stream, from 1, counting empty documents (a comment between two `---`)
    /// as a reader counts the separators.
    pub number: usize,
    /// Its content; an empty or `null` document is not yielded.
    pub content: Result<Value, ReadError>,
}

/// Every non-empty document of `text`, in order. After a syntax error nothing more is read;
/// after a document that is YAML but not JSON (a NaN, a duplicate key) the next one is.
pub fn documents(text: &str) -> Vec<Document> {
    // serde-saphyr skips empty documents without a trace; their separators are counted here
    // so that "document 3" still means the third.
    let starts: Vec<u64> = Parser::new_from_str(text)
        .map_while(Result::ok)
        .filter(|(event, _)| matches!(event, Event::DocumentStart(..)))
        .map(|(_, span)| span.start.line() as u64)
        .collect();
    let number = |line: u64| starts.partition_point(|&start| start <= line).max(1);
    let options = serde_saphyr::options! {
        with_snippet: false,
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
    };
    let mut input = text.as_bytes();
    serde_saphyr::read_with_options::<_, Spanned<Value>>(&mut input, options)
        .map(|document| match document {
            Ok(value) => Document {
                number: number(value.referenced.line()),
                content: Ok(value.value),
            },
            Err(e) => Document {
                number: number(e.location().map_or(u64::MAX, |l| l.line())),
                content: Err(ReadError(e.render_with_formatter(&UserMessageFormatter))),
            },
        })
        .collect()
}

/// `value` as a YAML document: block style, a long string on one line, a multi-line one as a
/// `|` block, quotes only where a YAML 1.1 reader (kubectl's) would read another type.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, WriteError> {
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn numbers_and_contents(text: &str) -> Vec<(usize, Result<Value, String>)> {
        documents(text)
            .into_iter()
            .map(|d| (d.number, d.content.map_err(|e| e.to_string())))
            .collect()
    }

    #[test]
    fn empty_documents_are_skipped_but_keep_their_number() {
        let text = "# Source: a.yaml\n---\n# Source: b.yaml, empty\n---\nkind: Pod\n---\n---\n\
                    kind: ServiceAccount\n---\n";
        assert_eq!(
            numbers_and_contents(text),
            [
                (2, Ok(json!({"kind": "Pod"}))),
                (4, Ok(json!({"kind": "ServiceAccount"})))
            ]
        );
    }

    #[test]
    fn scalars_are_read_as_yaml_1_2_so_kubectl_style_strings_stay_strings() {
        let text = "[yes, on, y, 0755, 1_000, 2024-01-01, 12:30, true, 0x1F, 1.5, ~]";
        assert_eq!(
            numbers_and_contents(text),
            [(
                1,
                Ok(json!([
                    "yes",
                    "on",
                    "y",
                    "0755",
                    "1_000",
                    "2024-01-01",
                    "12:30",
                    true,
                    31,
                    1.5,
                    null
                ]))
            )]
        );
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_document_and_position_and_ends_the_stream() {
        let read = numbers_and_contents("a: 1\n---\nb: [\n---\nc: 1\n");
        assert_eq!(read.len(), 2, "{read:?}");
        assert_eq!(read[0], (1, Ok(json!({"a": 1}))));
        let (number, Err(message)) = &read[1] else {
            panic!("{read:?}");
        };
        assert_eq!(*number, 2);
        assert!(message.contains("line 3"), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }

    #[test]
    fn a_duplicate_key_fails_its_document_with_the_key_quoted_and_the_next_is_read() {
        let read = numbers_and_contents("a: 1\na: 2\n---\nb: 1\n");
        assert_eq!(
            read,
            [
                (
                    1,
                    Err("duplicate mapping key `a` is not allowed here at line 2, column 1".into())
                ),
                (2, Ok(json!({"b": 1})))
            ]
        );
    }

    #[test]
    fn objects_are_written_in_block_style_quoting_only_what_a_yaml_1_1_reader_would_retype() {
        let long = "word ".repeat(30).trim_end().to_owned();
        let written = to_string(&json!({
            "labels": {"pull": "on", "reconciled": "true", "app": "web"},
            "long": long,
            "script": "set -e\nexec cheiron\n",
            "items": [{"name": "a"}],
        }))
        .map_err(|e| e.to_string());
        assert_eq!(
            written,
            Ok(format!(
                "items:\n- name: a\nlabels:\n  app: web\n  pull: \"on\"\n  reconciled: \"true\"\n\
                 long: {long}\nscript: |\n  set -e\n  exec cheiron\n"
            ))
        );
    }
}
