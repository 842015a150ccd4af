//! Messages cheiron shows to others (HTTP error bodies, status conditions, Events) are
//! bounded: a serde or API message may quote its input, and that input is not ours to repeat
//! at length, nor repeated.

pub use cheiron_core::message::truncate;

/// A Kubernetes API error as one line: the apiserver's message and code, without kube's
/// debug dump of the whole `Status` (and without any object content). Any other error (a
/// connection, a body that does not decode) is shown with the values it quotes hidden
/// ([`without_values`]): a Secret that fails to decode must not have its data repeated in a
/// status, an Event or a log.
pub fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message.trim(), s.code),
        other => without_values(&other.to_string()),
    }
}

/// A watch's error as one line, its apiserver answer as [`api_error`] gives it (kube-runtime's
/// own Display appends the whole `Status` as debug output).
pub fn watch_error(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match e {
        Error::InitialListFailed(k) => format!("initial list failed: {}", api_error(k)),
        Error::WatchStartFailed(k) => format!("watch start failed: {}", api_error(k)),
        Error::WatchError(s) => format!("watch error: {} ({})", s.message.trim(), s.code),
        Error::WatchFailed(k) => format!("watch failed: {}", api_error(k)),
        other => without_values(&other.to_string()),
    }
}

/// A parser's message with every value it quotes hidden: serde quotes the unexpected value
/// (``invalid type: integer `918273645`, expected a string``, `string "s3cr3t"`), and in a
/// manager that value may be a password. The shape of the message, and its line and column,
/// stay.
pub fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut closing: Option<char> = None;
    for c in message.chars() {
        match closing {
            Some(end) if c == end => {
                out.push('…');
                out.push(c);
                closing = None;
            }
            Some(_) => {}
            None => {
                out.push(c);
                if c == '`' || c == '"' {
                    closing = Some(c);
                }
            }
        }
    }
    if closing.is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{api_error, watch_error, without_values};

    #[test]
    fn an_error_that_is_not_the_apis_never_repeats_the_values_it_quotes() {
        // What kube returns when an answer does not decode: serde's message quotes the value.
        let decoding = serde_json::from_str::<u32>(r#""s3cr3t-password""#)
            .err()
            .map(kube::Error::SerdeError);
        let line = decoding.as_ref().map(api_error).unwrap_or_default();
        assert!(line.contains("invalid type: string"), "{line}");
        assert!(!line.contains("s3cr3t"), "{line}");
    }

    #[test]
    fn quoted_values_are_hidden_and_the_shape_stays() {
        assert_eq!(
            without_values(
                "invalid type: integer `918273645`, expected a string at line 9 column 15"
            ),
            "invalid type: integer `…`, expected a string at line 9 column 15"
        );
        assert_eq!(
            without_values(r#"invalid value: string "s3cr3t", expected x"#),
            r#"invalid value: string "…", expected x"#
        );
        assert_eq!(without_values("unterminated `s3cr"), "unterminated `…");
        assert_eq!(without_values("nothing quoted"), "nothing quoted");
    }

    #[test]
    fn a_watch_error_reads_as_the_apiservers_message_and_code_without_the_status_dump() {
        let status = || {
            Box::new(kube::core::Status {
                code: 403,
                message: "secrets is forbidden: User \"x\" cannot watch".to_owned(),
                reason: "Forbidden".to_owned(),
                ..kube::core::Status::default()
            })
        };
        let listed = kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(status()));
        assert_eq!(
            watch_error(&listed),
            "initial list failed: secrets is forbidden: User \"x\" cannot watch (403)"
        );
        let ended = kube::runtime::watcher::Error::WatchError(status());
        assert_eq!(
            watch_error(&ended),
            "watch error: secrets is forbidden: User \"x\" cannot watch (403)"
        );
        assert!(!watch_error(&ended).contains("Status {"));
    }
}
