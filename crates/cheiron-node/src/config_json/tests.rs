//! Merge and removal: exact restoration, foreign entries untouched, the existing entry wins,
//! and crashes between the two files.

use proptest::prelude::*;

use super::*;

/// Registry keys, some of them the same registry as the kubelet reads them.
const KEYS: [&str; 9] = [
    "registry.example.com",
    "https://registry.example.com/v1/",
    "quay.io",
    "ghcr.io/team",
    "docker.io",
    "https://index.docker.io/v1/",
    "*.example.org",
    "localhost:5000",
    "weird \"key\"\\n",
];

fn space() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", " ", "\n", "\t", "  \n    ", "\r\n"]).prop_map(str::to_owned)
}

/// An entry's JSON text, in a random layout, sometimes with members cheiron never writes.
fn entry_text() -> impl Strategy<Value = String> {
    (
        space(),
        space(),
        "[A-Za-z0-9+/]{4,12}",
        prop::option::of("[a-z@.]{1,10}"),
    )
        .prop_map(|(a, b, auth, email)| {
            let email = email.map_or_else(String::new, |e| format!(",{a}\"email\":{b}\"{e}\""));
            format!("{{{a}\"auth\"{b}:{a}\"{auth}=\"{email}{b}}}")
        })
}

/// A config.json as another tool may have written it: `auths` (or not), other members, any
/// layout.
fn original_file() -> impl Strategy<Value = Option<String>> {
    let entries =
        prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), entry_text(), 0..4);
    let file = (
        prop::option::of(entries),
        prop::option::of("[a-z]{1,8}"),
        any::<bool>(),
        space(),
        space(),
    )
        .prop_map(|(auths, creds_store, auths_last, s1, s2)| {
            let mut members = Vec::new();
            if let Some(store) = creds_store {
                members.push(format!("{s1}\"credsStore\"{s2}:{s1}\"{store}\""));
            }
            if let Some(auths) = auths {
                let inner: Vec<String> = auths
                    .iter()
                    .map(|(k, v)| format!("{s2}{}{s1}:{s2}{v}", quote(k)))
                    .collect();
                let text = format!("{s1}\"auths\":{s2}{{{}{s1}}}", inner.join(","));
                if auths_last {
                    members.push(text);
                } else {
                    members.insert(0, text);
                }
            }
            format!("{s2}{{{}{s1}}}{s2}", members.join(","))
        });
    prop::option::of(file)
}

fn desired() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(
        (
            prop::sample::select(KEYS.to_vec()),
            "[a-z]{1,6}",
            "[a-z0-9]{1,8}",
        ),
        0..4,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(k, u, p)| (k.to_owned(), cheiron_entry(&u, &p)))
            .collect()
    })
}

fn cheiron_entry(user: &str, password: &str) -> String {
    format!(r#"{{"username":"{user}","password":"{password}"}}"#)
}

/// `auths` of a file, `(key, raw text)`, through the same reader the merge uses.
fn auths_of(bytes: &[u8]) -> Vec<(String, String)> {
    match ConfigJson::parse(bytes) {
        Ok(c) => c
            .auths
            .into_iter()
            .map(|(k, v)| (k, v.get().to_owned()))
            .collect(),
        Err(e) => unreachable!("the merge wrote unreadable JSON: {e}"),
    }
}

fn others_of(bytes: &[u8]) -> Vec<(String, String)> {
    match ConfigJson::parse(bytes) {
        Ok(c) => c
            .members
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v.get().to_owned())))
            .collect(),
        Err(e) => unreachable!("{e}"),
    }
}

/// `value` as another tool would write it back: the same JSON value, members in sorted or
/// reversed order, compact or indented by `indent`.
fn reserialise(value: &serde_json::Value, reverse: bool, indent: Option<&str>) -> String {
    fn write(
        v: &serde_json::Value,
        reverse: bool,
        indent: Option<&str>,
        depth: usize,
        out: &mut String,
    ) {
        let newline = |out: &mut String, depth: usize| {
            if let Some(unit) = indent {
                out.push('\n');
                out.push_str(&unit.repeat(depth));
            }
        };
        match v {
            serde_json::Value::Object(members) => {
                let mut members: Vec<_> = members.iter().collect();
                if reverse {
                    members.reverse();
                }
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline(out, depth + 1);
                    out.push_str(&quote(key));
                    out.push_str(if indent.is_some() { ": " } else { ":" });
                    write(value, reverse, indent, depth + 1, out);
                }
                if !members.is_empty() {
                    newline(out, depth);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, reverse, indent, 0, &mut out);
    out.push('\n');
    out
}

fn plan_ok(
    current: Option<&[u8]>,
    state: Option<&MergeState>,
    desired: &[(String, String)],
) -> Result<Merge, TestCaseError> {
    plan(current, state, desired).map_err(|e| TestCaseError::fail(e.to_string()))
}

/// `desired` merged into `original`, the merged file, and its JSON value (`None`: nothing was
/// written).
fn merged_value(
    original: Option<&[u8]>,
    desired: &[(String, String)],
) -> Result<Option<(Merge, serde_json::Value)>, TestCaseError> {
    let merged = plan_ok(original, None, desired)?;
    let Some(content) = merged.content.as_deref() else {
        return Ok(None);
    };
    let value = serde_json::from_slice(content).map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(Some((merged, value)))
}

proptest! {
    #[test]
    fn merge_then_removal_restores_the_original_exactly(
        original in original_file(),
        desired in desired(),
        rotated in desired(),
    ) {
        let original = original.map(String::into_bytes);
        let merged = plan_ok(original.as_deref(), None, &desired)?;
        // A rotation in between does not change what removal gives back.
        let rotated = plan_ok(merged.content.as_deref(), merged.state.as_ref(), &rotated)?;
        let removed = plan_ok(rotated.content.as_deref(), rotated.state.as_ref(), &[])?;
        prop_assert_eq!(&removed.content, &original);
        prop_assert!(removed.state.is_none());
    }

    /// Another tool read the file and wrote it back: the same JSON value, members reordered,
    /// other whitespace. Removal still takes cheiron's entries out, and gives the original back
    /// byte for byte; the state goes only then.
    #[test]
    fn removal_after_another_tool_re_serialised_the_file_restores_the_original(
        original in original_file(),
        desired in desired(),
        reverse in any::<bool>(),
        indent in prop::sample::select(vec![None, Some("  "), Some("\t"), Some("    ")]),
    ) {
        let original = original.map(String::into_bytes);
        let Some((merged, value)) = merged_value(original.as_deref(), &desired)? else {
            return Ok(());
        };
        prop_assume!(merged.state.is_some());
        let rewritten = reserialise(&value, reverse, indent);
        prop_assert!(same_json(rewritten.as_bytes(), merged.content.as_deref().unwrap_or_default()));
        let removed = plan_ok(Some(rewritten.as_bytes()), merged.state.as_ref(), &[])?;
        prop_assert_eq!(&removed.content, &original);
        prop_assert!(removed.state.is_none());
        prop_assert!(removed.leftovers.is_empty());
    }

    /// Another tool re-serialised the file and also changed cheiron's entries (one more
    /// member): they cannot be removed, so they are reported and the state kept; once the
    /// entries are gone, the state goes too.
    #[test]
    fn an_entry_another_tool_changed_is_reported_and_the_state_kept_until_it_is_gone(
        original in original_file(),
        desired in desired(),
        reverse in any::<bool>(),
    ) {
        let original = original.map(String::into_bytes);
        let Some((merged, mut value)) = merged_value(original.as_deref(), &desired)? else {
            return Ok(());
        };
        prop_assume!(!merged.added.is_empty());
        for key in &merged.added {
            if let Some(serde_json::Value::Object(entry)) = value["auths"].get_mut(key) {
                entry.insert("email".to_owned(), serde_json::json!("ops@example.com"));
            }
        }
        let edited = reserialise(&value, reverse, Some("  "));
        let removed = plan_ok(Some(edited.as_bytes()), merged.state.as_ref(), &[])?;
        let mut leftovers = removed.leftovers.clone();
        leftovers.sort();
        let mut added = merged.added.clone();
        added.sort();
        prop_assert_eq!(leftovers, added);
        prop_assert!(removed.state.is_some(), "the state went while a credential is left");
        // The next pass says the same, and keeps the state.
        let again = plan_ok(removed.content.as_deref(), removed.state.as_ref(), &[])?;
        prop_assert_eq!(&again.leftovers, &removed.leftovers);
        prop_assert_eq!(&again.state, &removed.state);
        // Someone removes the entries: the state goes.
        if let Some(auths) = value["auths"].as_object_mut() {
            for key in &merged.added {
                auths.remove(key);
            }
        }
        let cleaned = reserialise(&value, reverse, None);
        let cleared = plan_ok(Some(cleaned.as_bytes()), again.state.as_ref(), &[])?;
        prop_assert!(cleared.leftovers.is_empty());
        prop_assert!(cleared.state.is_none());
        let left = auths_of(cleared.content.as_deref().unwrap_or_default());
        prop_assert!(!left.iter().any(|(k, _)| merged.added.contains(k)));
    }

    #[test]
    fn foreign_entries_are_never_changed_and_win_conflicts(
        original in original_file().prop_filter("a file", Option::is_some),
        desired in desired(),
    ) {
        let original = original.unwrap_or_default().into_bytes();
        let merged = plan_ok(Some(&original), None, &desired)?;
        let content = merged.content.clone().unwrap_or_default();
        let before = auths_of(&original);
        let after = auths_of(&content);
        // Every foreign entry is there, byte for byte, in its place.
        prop_assert_eq!(&after[..before.len()], &before[..]);
        prop_assert_eq!(others_of(&content), others_of(&original));
        // Every added entry is cheiron's, for a registry the file did not hold.
        for (key, entry) in &after[before.len()..] {
            prop_assert!(merged.added.contains(key));
            prop_assert!(desired.iter().any(|(k, e)| k == key && e == entry));
            let parsed = RegistryKey::parse(key);
            prop_assert!(!before.iter().any(|(k, _)| RegistryKey::parse(k).same_registry(&parsed)));
        }
        // Every desired registry the file held is reported, naming the file's key.
        for (key, _) in &desired {
            let parsed = RegistryKey::parse(key);
            if let Some((held, _)) = before.iter().find(|(k, _)| RegistryKey::parse(k).same_registry(&parsed)) {
                let conflict = Conflict { key: key.clone(), existing: held.clone() };
                prop_assert!(merged.conflicts.contains(&conflict), "{:?}", conflict);
            }
        }
    }

    #[test]
    fn removal_after_another_tool_edited_the_file_keeps_that_tool_s_change(
        original in original_file(),
        desired in desired().prop_filter("something to add", |d| !d.is_empty()),
        foreign in entry_text(),
    ) {
        let original = original.map(String::into_bytes);
        let merged = plan_ok(original.as_deref(), None, &desired)?;
        let Some(content) = merged.content.clone() else { return Ok(()) };
        // Another tool adds its own registry after cheiron's merge.
        let mut edited = match ConfigJson::parse(&content) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let foreign_raw = RawValue::from_string(foreign.clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        edited.auths.push(("other-tool.example.net".to_owned(), foreign_raw));
        let edited = edited.to_bytes();
        let removed = plan_ok(Some(&edited), merged.state.as_ref(), &[])?;
        let left = auths_of(&removed.content.unwrap_or_default());
        let mut expected = original.as_deref().map(auths_of).unwrap_or_default();
        expected.push(("other-tool.example.net".to_owned(), foreign));
        prop_assert_eq!(left, expected);
    }
}

#[test]
fn the_existing_entry_wins_and_is_reported() -> Result<(), MergeError> {
    let original = br#"{"auths":{"https://index.docker.io/v1/":{"auth":"b3JpZ2luYWw="}}}"#;
    let desired = [
        ("docker.io".to_owned(), cheiron_entry("u", "p")),
        ("quay.io".to_owned(), cheiron_entry("q", "r")),
    ];
    let merged = plan(Some(original), None, &desired)?;
    assert_eq!(
        merged.conflicts,
        [Conflict {
            key: "docker.io".to_owned(),
            existing: "https://index.docker.io/v1/".to_owned(),
        }]
    );
    assert_eq!(merged.added, ["quay.io"]);
    let text = String::from_utf8(merged.content.unwrap_or_default()).unwrap_or_default();
    assert!(
        text.contains(r#""https://index.docker.io/v1/": {"auth":"b3JpZ2luYWw="}"#),
        "{text}"
    );
    assert!(!text.contains(r#""docker.io""#), "{text}");
    Ok(())
}

#[test]
fn bad_files_are_refused_without_quoting_them() {
    let secret = "c2VjcmV0";
    for bad in [
        format!("not json {secret}"),
        format!(r#"["{secret}"]"#),
        format!(r#"{{"auths":"{secret}"}}"#),
        format!(r#"{{"auths":{{"a":{{"auth":"{secret}"}},"a":{{}}}}}}"#),
    ] {
        let desired = [("quay.io".to_owned(), cheiron_entry("u", "p"))];
        match plan(Some(bad.as_bytes()), None, &desired) {
            Err(e) => assert!(!e.to_string().contains(secret), "{e}"),
            Ok(m) => panic!("accepted {bad:?}: {m:?}"),
        }
    }
}

#[test]
fn no_file_and_nothing_added_means_no_file() -> Result<(), MergeError> {
    let merged = plan(
        None,
        None,
        &[("quay.io".to_owned(), cheiron_entry("u", "p"))],
    )?;
    let removed = plan(merged.content.as_deref(), merged.state.as_ref(), &[])?;
    assert_eq!(removed.content, None);
    assert_eq!(removed.state, None);
    Ok(())
}

/// A crash after each step of `sync`, then the next run (same desire), then removal: the file
/// is the original, byte for byte, and no state is left.
#[test]
fn a_crash_between_the_state_and_the_file_is_recovered_by_the_next_run() -> Result<(), MergeError> {
    let original =
        "{\n\t\"auths\": {\"quay.io\": {\"auth\": \"eDp5\"}},\n\t\"credsStore\": \"x\"\n}";
    let first = [("ghcr.io/team".to_owned(), cheiron_entry("a", "b"))];
    let rotated = [
        ("ghcr.io/team".to_owned(), cheiron_entry("a", "c")),
        ("docker.io".to_owned(), cheiron_entry("d", "e")),
    ];
    let io = |e: std::io::Error| MergeError::Io {
        what: "test".to_owned(),
        source: e,
    };
    for step in [SyncStep::StateWritten, SyncStep::FileWritten] {
        for (before, during) in [
            (&[][..], &first[..]),
            (&first[..], &rotated[..]),
            (&first[..], &[][..]),
        ] {
            let dir = tempfile::tempdir().map_err(io)?;
            let config = dir.path().join("config.json");
            let state = dir.path().join("config.json.cheiron-state");
            std::fs::write(&config, original).map_err(io)?;
            sync(&config, &state, before)?;
            let crashed = sync_with(&config, &state, during, &mut |s| {
                if s == step {
                    Err(std::io::Error::other("simulated crash"))
                } else {
                    Ok(())
                }
            });
            assert!(crashed.is_err());
            // Whatever the crash left, the file is readable JSON.
            let now = std::fs::read(&config).map_err(io)?;
            assert!(ConfigJson::parse(&now).is_ok());
            sync(&config, &state, during)?;
            let now = std::fs::read(&config).map_err(io)?;
            let keys: Vec<String> = auths_of(&now).into_iter().map(|(k, _)| k).collect();
            let mut expected = vec!["quay.io".to_owned()];
            expected.extend(during.iter().map(|(k, _)| k.clone()));
            assert_eq!(keys, expected, "{step:?} {during:?}");
            sync(&config, &state, &[])?;
            assert_eq!(
                std::fs::read_to_string(&config).map_err(io)?,
                original,
                "{step:?} {during:?}"
            );
            assert!(!state.exists(), "{step:?}");
        }
    }
    Ok(())
}

#[test]
fn both_files_are_private_even_when_the_config_was_readable_by_all()
-> Result<(), Box<dyn std::error::Error>> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    let state = dir.path().join("state");
    let desired = [("quay.io".to_owned(), cheiron_entry("u", "NODE-S3CRET"))];
    std::fs::write(&config, "{}")?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644))?;
    let synced = sync(&config, &state, &desired)?;
    assert!(synced.changed);
    assert_eq!(atomic::mode_of(&config)?, Some(0o600));
    assert_eq!(atomic::mode_of(&state)?, Some(0o600));
    let again = sync(&config, &state, &desired)?;
    assert!(
        !again.changed,
        "an unchanged desire does not rewrite the file"
    );
    // A file holding cheiron's entries made readable again (an older cheiron kept the
    // file's mode) is made private again, even with nothing else to change.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644))?;
    let exposed = sync(&config, &state, &desired)?;
    assert!(exposed.changed);
    assert_eq!(atomic::mode_of(&config)?, Some(0o600));
    Ok(())
}

#[test]
fn a_config_json_that_is_a_symbolic_link_is_refused_and_its_target_untouched()
-> Result<(), Box<dyn std::error::Error>> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let target = dir.path().join("real-config.json");
    let original = "{\"auths\": {\"quay.io\": {\"auth\": \"eDp5\"}}}";
    std::fs::write(&target, original)?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))?;
    let config = dir.path().join("config.json");
    std::os::unix::fs::symlink(&target, &config)?;
    let state = dir.path().join("state");
    let desired = [("ghcr.io".to_owned(), cheiron_entry("u", "NODE-S3CRET"))];
    match sync(&config, &state, &desired) {
        Err(MergeError::Link { path }) => assert_eq!(path, config.display().to_string()),
        other => panic!("a link was not refused: {other:?}"),
    }
    let message = sync(&config, &state, &desired)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("is a symbolic link"), "{message}");
    assert!(!message.contains("NODE-S3CRET"), "{message}");
    assert!(std::fs::symlink_metadata(&config)?.file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target)?, original);
    assert_eq!(atomic::mode_of(&target)?, Some(0o644));
    assert!(!state.exists());
    // A merge state that is a link is refused too.
    std::fs::remove_file(&config)?;
    std::fs::write(&config, original)?;
    std::os::unix::fs::symlink(&target, &state)?;
    assert!(matches!(
        sync(&config, &state, &desired),
        Err(MergeError::Link { .. })
    ));
    assert_eq!(std::fs::read_to_string(&config)?, original);
    Ok(())
}

/// The issue's case: the kubelet's config.json re-serialised by another tool (same entries,
/// other order and whitespace), then the manager deleted.
#[test]
fn a_re_serialised_config_json_loses_cheiron_s_credential_on_removal()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    let state = dir.path().join("state");
    let original = "{\"auths\":{\"quay.io\":{\"auth\":\"eDp5\"}},\"credsStore\":\"x\"}\n";
    std::fs::write(&config, original)?;
    let desired = [(
        "registry.example.com".to_owned(),
        cheiron_entry("node", "NODE-S3CRET"),
    )];
    sync(&config, &state, &desired)?;
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&config)?)?;
    std::fs::write(&config, reserialise(&value, true, Some("\t")))?;
    let removed = sync(&config, &state, &[])?;
    assert!(removed.leftovers.is_empty());
    let now = std::fs::read_to_string(&config)?;
    assert!(!now.contains("NODE-S3CRET"), "{now}");
    assert_eq!(now, original);
    assert!(!state.exists());
    Ok(())
}

/// Another tool edited cheiron's entry (the password kept): the entry stays, reported by key
/// (never its value), and so does the state, until the entry is gone.
#[test]
fn an_edited_entry_is_a_leftover_until_it_is_removed() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    let state = dir.path().join("state");
    let desired = [(
        "registry.example.com".to_owned(),
        cheiron_entry("node", "NODE-S3CRET"),
    )];
    sync(&config, &state, &desired)?;
    let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&config)?)?;
    value["auths"]["registry.example.com"]["username"] = serde_json::json!("renamed");
    std::fs::write(&config, value.to_string())?;
    let removed = sync(&config, &state, &[])?;
    assert_eq!(removed.leftovers, ["registry.example.com"]);
    assert!(!format!("{removed:?}").contains("NODE-S3CRET"));
    assert!(
        state.exists(),
        "the state went while the credential is left"
    );
    let again = sync(&config, &state, &[])?;
    assert_eq!(again.leftovers, ["registry.example.com"]);
    assert!(!again.changed);
    // While the entry is there, a manager selecting the node again finds it in the way.
    let back = sync(&config, &state, &desired)?;
    assert_eq!(back.leftovers, ["registry.example.com"]);
    assert_eq!(back.conflicts.len(), 1);
    // The operator removes it: the state goes.
    sync(&config, &state, &[])?;
    std::fs::write(&config, "{\"auths\": {}}")?;
    let cleared = sync(&config, &state, &[])?;
    assert!(cleared.leftovers.is_empty());
    assert!(!state.exists());
    Ok(())
}

/// Another tool replaced cheiron's credential under the same key with one of its own: nothing
/// of cheiron's is left, the entry is that tool's, and the state goes.
#[test]
fn an_entry_whose_secrets_were_all_replaced_is_not_a_leftover()
-> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    let state = dir.path().join("state");
    let desired = [(
        "registry.example.com".to_owned(),
        cheiron_entry("node", "NODE-S3CRET"),
    )];
    sync(&config, &state, &desired)?;
    let theirs = format!(
        "{{\"auths\": {{\"registry.example.com\": {}}}}}",
        cheiron_entry("other", "THEIRS")
    );
    std::fs::write(&config, &theirs)?;
    let removed = sync(&config, &state, &[])?;
    assert!(removed.leftovers.is_empty());
    assert_eq!(std::fs::read_to_string(&config)?, theirs);
    assert!(!state.exists());
    Ok(())
}
