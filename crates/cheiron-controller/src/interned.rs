//! Strings the controller's caches share: a ServiceAccount's name such as `default`, label and
//! annotation keys and values, the pull secret names cheiron adds, the namespace and name of
//! each of its Secrets. Each distinct string is held once and referred to by an `Arc<str>`.

use std::{collections::HashSet, sync::Arc};

/// Shared strings. A string nobody holds any more is dropped when the table has doubled since
/// the last sweep, so churn does not grow it.
#[derive(Debug, Default)]
pub struct Strings {
    table: HashSet<Arc<str>>,
    swept_at: usize,
}

impl Strings {
    /// The shared copy of `s`.
    pub fn share(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.table.get(s) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(s);
        self.table.insert(shared.clone());
        shared
    }

    /// Drops the strings only the table holds, if it has doubled since the last sweep.
    pub fn sweep_if_grown(&mut self) {
        if self.table.len() > 2 * self.swept_at.max(1024) {
            self.sweep();
        }
    }

    pub fn sweep(&mut self) {
        self.table.retain(|s| Arc::strong_count(s) > 1);
        self.table.shrink_to_fit();
        self.swept_at = self.table.len();
    }

    /// Distinct strings held.
    pub fn len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_held_once_and_swept_when_only_the_table_holds_it() {
        let mut strings = Strings::default();
        let a = strings.share("default");
        let b = strings.share("default");
        assert!(Arc::ptr_eq(&a, &b));
        let gone = strings.share("gone");
        drop(gone);
        strings.sweep();
        assert_eq!(strings.len(), 1, "only `default` is still held");
        drop((a, b));
        strings.sweep();
        assert_eq!(strings.len(), 0);
    }
}
