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

fn plan_ok(
    current: Option<&[u8]>,
    state: Option<&MergeState>,
    desired: &[(String, String)],
) -> Result<Merge, TestCaseError> {
    plan(current, state, desired).map_err(|e| TestCaseError::fail(e.to_string()))
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
fn the_state_is_private_and_the_file_keeps_its_mode() -> Result<(), Box<dyn std::error::Error>> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.json");
    let state = dir.path().join("state");
    std::fs::write(&config, "{}")?;
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640))?;
    let synced = sync(
        &config,
        &state,
        &[("quay.io".to_owned(), cheiron_entry("u", "p"))],
    )?;
    assert!(synced.changed);
    assert_eq!(atomic::mode_of(&config)?, Some(0o640));
    assert_eq!(atomic::mode_of(&state)?, Some(0o600));
    let again = sync(
        &config,
        &state,
        &[("quay.io".to_owned(), cheiron_entry("u", "p"))],
    )?;
    assert!(
        !again.changed,
        "an unchanged desire does not rewrite the file"
    );
    Ok(())
}
