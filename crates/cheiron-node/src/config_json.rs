//! Merging cheiron's registries into the kubelet's `config.json` (`/var/lib/kubelet/config.json`,
//! the HyperShift way), and taking them out again, without the two failures that way is known
//! for: clobbering entries another tool wrote, and a removal that does not give back the file
//! as it was.
//!
//! - **Foreign entries are kept byte for byte.** The file is read member by member as raw JSON
//!   text; an entry cheiron did not add is written back exactly as it was read (keys are
//!   re-escaped, values are not touched), and every other top-level member too.
//! - **The existing entry wins.** A registry the file already holds (as the kubelet reads keys:
//!   `docker.io` and `https://index.docker.io/v1/` are one) is not added; it is reported as a
//!   [`Conflict`].
//! - **Removal restores the original exactly.** A [`MergeState`], kept beside the file, records
//!   the file as it was before cheiron's entries (byte for byte), the hash of what cheiron wrote
//!   and the entries it added. While the file is what cheiron wrote, removing cheiron's entries
//!   writes the recorded original back unchanged. When another tool changed the file since,
//!   the entries still as cheiron wrote them are removed, compared as JSON values (another
//!   tool re-serialising the file reorders members and changes whitespace), and everything
//!   else, including that tool's change, stays; if what is left is the original as a JSON
//!   value, the original is written back byte for byte.
//! - **A credential left behind is reported, and the state kept until it is gone.** An entry
//!   under a registry cheiron added that still holds one of cheiron's secrets (`password`,
//!   `auth`, `identitytoken`, `registrytoken`) but is no longer cheiron's entry (another tool
//!   edited it) cannot be removed safely: it is a [`Merge::leftovers`] key, and the state stays
//!   (it names the secrets to look for) until the entry no longer holds them.
//! - **Links are refused, the file is private.** A `config.json` (or state) that is a symbolic
//!   link is refused and left alone; cheiron writes both files with mode 0600.
//! - **Never a partial file.** Both files are written by [`super::atomic::write`]; the state is
//!   written before the file it describes, and keeps the previous write's hash and entries, so a
//!   crash between the two steps leaves a pair the next run reads correctly.
//!
//! A file that is not a JSON object (or whose `auths` is not an object, or that repeats a key)
//! is refused and left alone. Errors say where, never what: the file holds credentials.

use std::{fmt, io, path::Path};

use cheiron_core::registry::RegistryKey;
use serde::{
    Deserialize, Deserializer, Serialize,
    de::{MapAccess, Visitor},
};
use serde_json::value::RawValue;

use super::atomic::{self, PRIVATE_MODE};

/// How many writes a [`MergeState`] remembers: the last one and the one before.
const REMEMBERED_WRITES: usize = 2;

/// One registry entry cheiron added, exactly as written.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedEntry {
    /// The registry key.
    pub key: String,
    /// The entry's JSON text.
    pub entry: String,
}

/// One write of the file by cheiron.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// SHA-256 (hex) of the whole file as written.
    pub sha256: String,
    /// The entries this write added.
    pub added: Vec<AddedEntry>,
}

/// What cheiron remembers of its merge into one file (kept beside it, mode 0600: it holds the
/// original file, credentials included).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeState {
    /// The file without cheiron's entries, byte for byte; `None`: there was no file.
    pub original: Option<String>,
    /// The last writes, newest first (at most two).
    pub writes: Vec<Written>,
    /// Entries cheiron added whose secrets the file still holds under an entry another tool
    /// changed: kept until the file no longer holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leftover: Vec<AddedEntry>,
}

impl MergeState {
    /// Every entry cheiron added that the state remembers: the writes', then the leftovers.
    fn ours(&self) -> impl Iterator<Item = &AddedEntry> {
        self.writes
            .iter()
            .flat_map(|w| &w.added)
            .chain(&self.leftover)
    }
}

impl fmt::Debug for MergeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self
            .writes
            .iter()
            .flat_map(|w| w.added.iter().map(|a| a.key.as_str()))
            .collect();
        write!(
            f,
            "MergeState(original: {}, writes: {}, added: {keys:?}, leftover: {:?})",
            if self.original.is_some() {
                "file"
            } else {
                "none"
            },
            self.writes.len(),
            self.leftover.iter().map(|a| &a.key).collect::<Vec<_>>()
        )
    }
}

/// A registry cheiron would add but the file already holds; the file's entry is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// cheiron's key.
    pub key: String,
    /// The file's key for the same registry, as written.
    pub existing: String,
}

/// What a merge decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    /// The file's new content; `None`: the file should not exist.
    pub content: Option<Vec<u8>>,
    /// The state to keep beside it; `None`: cheiron has nothing in the file.
    pub state: Option<MergeState>,
    /// The keys cheiron's entries are under in the new content.
    pub added: Vec<String>,
    /// Registries left to the file's own entries.
    pub conflicts: Vec<Conflict>,
    /// Keys of entries that still hold a secret cheiron wrote but that another tool changed,
    /// so cheiron cannot remove them (the state is kept while there are any).
    pub leftovers: Vec<String>,
}

/// Why a file cannot be merged into. Describes structure, never content.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The file is not usable JSON of the expected shape.
    #[error("{what} is not a docker config.json: {problem}")]
    Invalid {
        /// Which file.
        what: &'static str,
        /// Where and what is wrong.
        problem: String,
    },
    /// The file is a symbolic link: replacing it would put the credentials in a new file where
    /// the link was, and following it would write them wherever it points.
    #[error(
        "{path} is a symbolic link; refusing to read or replace it (name the file itself, not a link to it)"
    )]
    Link {
        /// The link.
        path: String,
    },
    /// Reading or writing failed.
    #[error("{what}: {source}")]
    Io {
        /// Which file, what operation.
        what: String,
        /// The OS error.
        source: io::Error,
    },
}

/// One JSON object's members, in order, values as raw text; duplicate keys refused.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members: Vec<(String, Box<RawValue>)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!(
                            "the key {key:?} appears twice"
                        )));
                    }
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// A config.json read member by member.
struct ConfigJson {
    /// Top-level members; `auths` is `None` here and lives in [`Self::auths`].
    members: Vec<(String, Option<Box<RawValue>>)>,
    /// The `auths` object's members.
    auths: Vec<(String, Box<RawValue>)>,
}

fn parse_members(bytes: &[u8], what: &'static str) -> Result<Members, MergeError> {
    serde_json::from_slice(bytes).map_err(|e| MergeError::Invalid {
        what,
        problem: if e.is_data() && e.to_string().contains("appears twice") {
            // Our own message: names a registry key, no value.
            e.to_string()
        } else {
            format!(
                "not a JSON object (line {}, column {})",
                e.line(),
                e.column()
            )
        },
    })
}

impl ConfigJson {
    fn empty() -> Self {
        Self {
            members: vec![("auths".to_owned(), None)],
            auths: Vec::new(),
        }
    }

    fn parse(bytes: &[u8]) -> Result<Self, MergeError> {
        const WHAT: &str = "the kubelet config.json";
        let top = parse_members(bytes, WHAT)?;
        let mut auths = None;
        let mut members = Vec::with_capacity(top.0.len());
        for (key, value) in top.0 {
            if key == "auths" {
                let inner = parse_members(value.get().as_bytes(), WHAT).map_err(|e| match e {
                    MergeError::Invalid { problem, .. } if problem.contains("appears twice") => {
                        MergeError::Invalid {
                            what: WHAT,
                            problem: format!("in \"auths\", {problem}"),
                        }
                    }
                    _ => MergeError::Invalid {
                        what: WHAT,
                        problem: "\"auths\" is not an object".to_owned(),
                    },
                })?;
                auths = Some(inner.0);
                members.push((key, None));
            } else {
                members.push((key, Some(value)));
            }
        }
        if auths.is_none() {
            members.insert(0, ("auths".to_owned(), None));
        }
        Ok(Self {
            members,
            auths: auths.unwrap_or_default(),
        })
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = String::from("{");
        for (i, (key, value)) in self.members.iter().enumerate() {
            out.push_str(if i == 0 { "\n  " } else { ",\n  " });
            out.push_str(&quote(key));
            out.push_str(": ");
            match value {
                Some(raw) => out.push_str(raw.get()),
                None if self.auths.is_empty() => out.push_str("{}"),
                None => {
                    out.push('{');
                    for (j, (registry, entry)) in self.auths.iter().enumerate() {
                        out.push_str(if j == 0 { "\n    " } else { ",\n    " });
                        out.push_str(&quote(registry));
                        out.push_str(": ");
                        out.push_str(entry.get());
                    }
                    out.push_str("\n  }");
                }
            }
        }
        out.push_str("\n}\n");
        out.into_bytes()
    }
}

fn quote(key: &str) -> String {
    // A String always serialises.
    serde_json::to_string(key).unwrap_or_default()
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `text` as a JSON value (`None`: not JSON). Objects compare without regard to member order.
fn json_value(text: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(text).ok()
}

/// True when `a` and `b` are the same JSON value: what a tool re-serialising a file (member
/// order, whitespace, escapes) does not change.
fn same_json(a: &[u8], b: &[u8]) -> bool {
    matches!((json_value(a), json_value(b)), (Some(a), Some(b)) if a == b)
}

/// The members of a docker config entry that are secrets.
const SECRET_MEMBERS: [&str; 4] = ["password", "auth", "identitytoken", "registrytoken"];

/// True when `entry` holds, anywhere, a string equal to one of the secrets of `ours`.
fn holds_secret_of(entry: &RawValue, ours: &AddedEntry) -> bool {
    let Some(serde_json::Value::Object(written)) = json_value(ours.entry.as_bytes()) else {
        return false;
    };
    let secrets: Vec<&str> = SECRET_MEMBERS
        .iter()
        .filter_map(|m| written.get(*m).and_then(serde_json::Value::as_str))
        .filter(|s| !s.is_empty())
        .collect();
    fn any_string(value: &serde_json::Value, found: &dyn Fn(&str) -> bool) -> bool {
        match value {
            serde_json::Value::String(s) => found(s),
            serde_json::Value::Array(items) => items.iter().any(|v| any_string(v, found)),
            serde_json::Value::Object(members) => members.values().any(|v| any_string(v, found)),
            _ => false,
        }
    }
    json_value(entry.get().as_bytes()).is_some_and(|v| any_string(&v, &|s| secrets.contains(&s)))
}

/// The entries cheiron added (`state`) whose secrets `file` still holds under the same
/// registry: what removal could not take out.
fn leftovers_in(file: Option<&[u8]>, state: &MergeState) -> Result<Vec<AddedEntry>, MergeError> {
    let Some(file) = file else {
        return Ok(Vec::new());
    };
    let config = ConfigJson::parse(file)?;
    let mut out: Vec<AddedEntry> = Vec::new();
    for ours in state.ours() {
        let registry = RegistryKey::parse(&ours.key);
        let held = config.auths.iter().any(|(key, entry)| {
            RegistryKey::parse(key).same_registry(&registry) && holds_secret_of(entry, ours)
        });
        if held && !out.contains(ours) {
            out.push(ours.clone());
        }
    }
    Ok(out)
}

/// `current` without the entries `state` says cheiron added and that are still as written
/// (the same JSON value, under the same registry); `current` itself, byte for byte, when
/// there are none. When what is left is `state`'s original as a JSON value, the original, byte
/// for byte (`None`: there was no file and what is left is an empty config).
fn without_ours(current: &[u8], state: &MergeState) -> Result<Option<Vec<u8>>, MergeError> {
    let mut config = ConfigJson::parse(current)?;
    let before = config.auths.len();
    config.auths.retain(|(key, entry)| {
        let registry = RegistryKey::parse(key);
        !state.ours().any(|a| {
            RegistryKey::parse(&a.key).same_registry(&registry)
                && same_json(a.entry.as_bytes(), entry.get().as_bytes())
        })
    });
    if config.auths.len() == before {
        return Ok(Some(current.to_vec()));
    }
    let left = config.to_bytes();
    // The original as cheiron's merge reads it (an absent file, or one without `auths`, has
    // an empty `auths`), so that only what another tool's serialiser changes is ignored.
    let original = match &state.original {
        Some(text) => ConfigJson::parse(text.as_bytes())?.to_bytes(),
        None => ConfigJson::empty().to_bytes(),
    };
    if same_json(&left, &original) {
        return Ok(state.original.clone().map(String::into_bytes));
    }
    Ok(Some(left))
}

/// The file as it would be without cheiron: the original cheiron recorded when the file is
/// one of its own recent writes, the file without cheiron's entries when another tool wrote
/// it since, the file itself when cheiron has no state.
fn base_of(
    current: Option<&[u8]>,
    state: Option<&MergeState>,
) -> Result<Option<Vec<u8>>, MergeError> {
    Ok(match (state, current) {
        (Some(s), Some(c)) if s.writes.iter().any(|w| w.sha256 == sha256_hex(c)) => {
            s.original.clone().map(String::into_bytes)
        }
        (Some(s), Some(c)) => without_ours(c, s)?,
        (_, None) => None,
        (None, Some(c)) => Some(c.to_vec()),
    })
}

/// Appends to `config` each `desired` entry whose registry it does not hold yet (the first of
/// several for one registry); one for a registry the file already holds is a conflict and
/// left out. An entry that is not a JSON object is an error.
fn add(
    config: &mut ConfigJson,
    desired: &[(String, String)],
) -> Result<(Vec<AddedEntry>, Vec<Conflict>), MergeError> {
    let existing: Vec<RegistryKey> = config
        .auths
        .iter()
        .map(|(k, _)| RegistryKey::parse(k))
        .collect();
    let mut conflicts = Vec::new();
    let mut added: Vec<AddedEntry> = Vec::new();
    let mut added_keys: Vec<RegistryKey> = Vec::new();
    for (key, entry) in desired {
        let parsed = RegistryKey::parse(key);
        if let Some(other) = existing.iter().find(|e| e.same_registry(&parsed)) {
            conflicts.push(Conflict {
                key: key.clone(),
                existing: other.raw().to_owned(),
            });
            continue;
        }
        if added_keys.iter().any(|a| a.same_registry(&parsed)) {
            continue;
        }
        let raw = RawValue::from_string(entry.clone()).map_err(|_| MergeError::Invalid {
            what: "cheiron's entry",
            problem: format!("the entry for {key:?} is not JSON"),
        })?;
        if !raw.get().starts_with('{') {
            return Err(MergeError::Invalid {
                what: "cheiron's entry",
                problem: format!("the entry for {key:?} is not an object"),
            });
        }
        config.auths.push((key.clone(), raw));
        added.push(AddedEntry {
            key: key.clone(),
            entry: entry.clone(),
        });
        added_keys.push(parsed);
    }
    Ok((added, conflicts))
}

/// Decides the file's content for `desired` (registry key → entry JSON text): cheiron's entries
/// on top of the file without them. `current` is the file now, `state` what cheiron recorded
/// of its last merge. An empty `desired` removes cheiron's entries.
pub fn plan(
    current: Option<&[u8]>,
    state: Option<&MergeState>,
    desired: &[(String, String)],
) -> Result<Merge, MergeError> {
    let base = base_of(current, state)?;
    let leftover = match state {
        Some(s) => leftovers_in(base.as_deref(), s)?,
        None => Vec::new(),
    };
    let leftovers: Vec<String> = leftover.iter().map(|a| a.key.clone()).collect();
    // Nothing of cheiron's to add: the state stays only while a leftover needs it.
    let kept_state = state.filter(|_| !leftover.is_empty()).map(|s| MergeState {
        leftover: leftover.clone(),
        ..s.clone()
    });
    let unchanged = |conflicts| Merge {
        content: base.clone(),
        state: kept_state.clone(),
        added: Vec::new(),
        conflicts,
        leftovers: leftovers.clone(),
    };
    if desired.is_empty() {
        return Ok(unchanged(Vec::new()));
    }
    let mut config = match &base {
        Some(bytes) => ConfigJson::parse(bytes)?,
        None => ConfigJson::empty(),
    };
    let (added, conflicts) = add(&mut config, desired)?;
    if added.is_empty() {
        return Ok(unchanged(conflicts));
    }
    let content = config.to_bytes();
    let original = base
        .map(String::from_utf8)
        .transpose()
        .map_err(|_| MergeError::Invalid {
            what: "the kubelet config.json",
            problem: "not UTF-8".to_owned(),
        })?;
    let mut writes = vec![Written {
        sha256: sha256_hex(&content),
        added: added.clone(),
    }];
    if let Some(previous) = state {
        writes.extend(previous.writes.iter().take(REMEMBERED_WRITES - 1).cloned());
    }
    Ok(Merge {
        content: Some(content),
        state: Some(MergeState {
            original,
            writes,
            leftover,
        }),
        added: added.into_iter().map(|a| a.key).collect(),
        conflicts,
        leftovers,
    })
}

/// The points of [`sync`] a test can stop at, as a crash would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncStep {
    /// The new state is written; the file not yet.
    StateWritten,
    /// The file is written (or restored); an obsolete state not yet removed.
    FileWritten,
}

/// What [`sync`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// The keys cheiron's entries are under.
    pub added: Vec<String>,
    /// Registries left to the file's own entries.
    pub conflicts: Vec<Conflict>,
    /// Whether the file was rewritten.
    pub changed: bool,
    /// Registries whose entry still holds a secret cheiron wrote, changed by another tool
    /// ([`Merge::leftovers`]).
    pub leftovers: Vec<String>,
}

/// Brings `config` (the kubelet's config.json) in step with `desired`, remembering the merge
/// in `state_file`. Empty `desired`: restores the file cheiron found.
pub fn sync(
    config: &Path,
    state_file: &Path,
    desired: &[(String, String)],
) -> Result<Synced, MergeError> {
    sync_with(config, state_file, desired, &mut |_| Ok(()))
}

/// [`sync`], calling `after` after each [`SyncStep`]; an error stops it there.
pub fn sync_with(
    config: &Path,
    state_file: &Path,
    desired: &[(String, String)],
    after: &mut dyn FnMut(SyncStep) -> io::Result<()>,
) -> Result<Synced, MergeError> {
    let io = |what: String| move |source| MergeError::Io { what, source };
    for path in [config, state_file] {
        if atomic::is_link(path).map_err(io(format!("reading {}", path.display())))? {
            return Err(MergeError::Link {
                path: path.display().to_string(),
            });
        }
    }
    let current = atomic::read(config).map_err(io(format!("reading {}", config.display())))?;
    let state =
        match atomic::read(state_file).map_err(io(format!("reading {}", state_file.display())))? {
            Some(bytes) => Some(serde_json::from_slice::<MergeState>(&bytes).map_err(|e| {
                MergeError::Invalid {
                    what: "cheiron's merge state",
                    problem: format!("line {}, column {}", e.line(), e.column()),
                }
            })?),
            None => None,
        };
    let merge = plan(current.as_deref(), state.as_ref(), desired)?;
    if let Some(new_state) = &merge.state
        && state.as_ref() != Some(new_state)
    {
        let bytes = serde_json::to_vec(new_state).map_err(|e| MergeError::Io {
            what: "encoding the merge state".to_owned(),
            source: io::Error::other(e),
        })?;
        atomic::write(state_file, &bytes, PRIVATE_MODE)
            .map_err(io(format!("writing {}", state_file.display())))?;
    }
    let stop = |e: io::Error| MergeError::Io {
        what: "stopped".to_owned(),
        source: e,
    };
    after(SyncStep::StateWritten).map_err(stop)?;
    // A file holding cheiron's entries is rewritten when its mode is not private (a file
    // written before cheiron wrote 0600, or chmod-ed since).
    let exposed = merge.state.is_some()
        && atomic::mode_of(config)
            .map_err(io(format!("reading {}", config.display())))?
            .is_some_and(|mode| mode != PRIVATE_MODE);
    let changed = merge.content != current || exposed;
    if changed {
        match &merge.content {
            // Private whatever the file's mode was: it holds credentials.
            Some(bytes) => atomic::write(config, bytes, PRIVATE_MODE)
                .map_err(io(format!("writing {}", config.display())))?,
            None => atomic::remove(config).map_err(io(format!("removing {}", config.display())))?,
        }
    }
    after(SyncStep::FileWritten).map_err(stop)?;
    if merge.state.is_none() && state.is_some() {
        atomic::remove(state_file).map_err(io(format!("removing {}", state_file.display())))?;
    }
    Ok(Synced {
        added: merge.added,
        conflicts: merge.conflicts,
        changed,
        leftovers: merge.leftovers,
    })
}

#[cfg(test)]
mod tests;
