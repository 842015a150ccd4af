//! `cheiron explain`'s text output: the object's decision, each manager's verdict in words,
//! and a table of the Secrets.

use std::fmt::Write as _;

use super::{Explanation, SecretRow};

/// The words for an `Outcome::skipped` value.
fn skipped_words(skip: &str) -> &'static str {
    match skip {
        "object_opted_out" => "the object opts out",
        "namespace_opted_out" => "its namespace opts out",
        "no_matching_image" => {
            "its managers all use injection MatchingImages, and none serves one of its images"
        }
        _ => "no manager selects it",
    }
}

fn yes_no(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// Columns padded to their widest cell, two spaces apart, no trailing blanks.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 < row.len() {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn secret_cells(row: &SecretRow) -> Vec<String> {
    vec![
        row.name.clone(),
        yes_no(Some(row.referenced)).into(),
        yes_no(Some(row.wanted)).into(),
        yes_no(row.exists).into(),
        yes_no(row.managed_by_cheiron).into(),
        match &row.serves {
            None => "-".into(),
            Some(images) if images.is_empty() => "none".into(),
            Some(images) => images.join(", "),
        },
    ]
}

/// The text `cheiron explain` prints for one object.
pub fn text(explanation: &Explanation) -> String {
    let Explanation {
        kind,
        namespace,
        name,
        images,
        outcome,
        managers,
        secrets,
    } = explanation;
    let mut out = String::new();
    let shown = if name.is_empty() {
        "(generateName)"
    } else {
        name
    };
    let _ = writeln!(out, "{kind} {namespace}/{shown}");
    if !images.is_empty() {
        let _ = writeln!(out, "Images: {}", images.join(", "));
    }
    match outcome.skipped {
        Some(skip) => {
            let _ = writeln!(out, "Policy: wants nothing: {}", skipped_words(skip));
        }
        None if outcome.missing.is_empty() => {
            let _ = writeln!(
                out,
                "Policy: wants {}; all referenced",
                outcome.wanted.join(", ")
            );
        }
        None => {
            let _ = writeln!(
                out,
                "Policy: wants {}; missing {}",
                outcome.wanted.join(", "),
                outcome.missing.join(", ")
            );
        }
    }
    out.push_str("\nManagers:\n");
    if managers.is_empty() {
        out.push_str("  none: no cluster manager, and no manager in this namespace\n");
    }
    for m in managers {
        let _ = writeln!(out, "  {}: {}", m.manager, m.verdict.reason);
        if !m.verdict.wants.is_empty() {
            let _ = writeln!(out, "    wants {}", m.verdict.wants.join(", "));
        }
    }
    out.push_str("\nSecrets:\n");
    if secrets.is_empty() {
        out.push_str("  none referenced, none wanted\n");
        return out;
    }
    let mut rows = vec![
        [
            "NAME",
            "REFERENCED",
            "WANTED",
            "EXISTS",
            "CHEIRON",
            "SERVES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(secrets.iter().map(secret_cells));
    for line in table(&rows).lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}
