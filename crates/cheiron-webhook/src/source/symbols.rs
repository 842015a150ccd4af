//! Interned strings: each distinct string the webhook's caches hold (a namespace name, a Secret
//! name, a label key or value) is stored once and referred to by a 4-byte [`Sym`]. At 100 000
//! namespaces the same few label keys, and every namespace name (once for the namespace, again
//! for each of cheiron's Secrets in it), would otherwise be repeated hundreds of thousands of
//! times. Counted references: a string is freed when its last holder releases it, so churn
//! (namespaces coming and going) does not grow the table.

use std::{collections::HashMap, sync::Arc};

/// A string held by [`Symbols`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(u32);

impl Sym {
    /// The number behind the symbol, for packing into wider keys.
    pub fn index(self) -> u32 {
        self.0
    }

    /// The symbol numbered `index` (the inverse of [`Sym::index`]).
    pub(super) fn from_index(index: u32) -> Self {
        Self(index)
    }
}

#[derive(Debug)]
struct Slot {
    text: Arc<str>,
    holders: u32,
}

/// The table of interned strings.
#[derive(Debug, Default)]
pub struct Symbols {
    ids: HashMap<Arc<str>, Sym>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
}

impl Symbols {
    /// The symbol of `text`, adding it if new; the caller holds one more reference, to give
    /// back with [`Symbols::release`].
    pub fn intern(&mut self, text: &str) -> Sym {
        if let Some(&sym) = self.ids.get(text) {
            if let Some(Some(slot)) = self.slots.get_mut(sym.0 as usize) {
                slot.holders = slot.holders.saturating_add(1);
            }
            return sym;
        }
        let text: Arc<str> = Arc::from(text);
        let slot = Slot {
            text: text.clone(),
            holders: 1,
        };
        let sym = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                Sym(i)
            }
            None => {
                // More than 4 billion distinct strings cannot be held in memory anyway.
                let i = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                self.slots.push(Some(slot));
                Sym(i)
            }
        };
        self.ids.insert(text, sym);
        sym
    }

    /// Gives back one reference to `sym`; the string goes with the last one.
    pub fn release(&mut self, sym: Sym) {
        let Some(entry) = self.slots.get_mut(sym.0 as usize) else {
            return;
        };
        let last = match entry {
            Some(slot) => {
                slot.holders = slot.holders.saturating_sub(1);
                slot.holders == 0
            }
            None => false,
        };
        if last && let Some(slot) = entry.take() {
            self.ids.remove(&slot.text);
            self.free.push(sym.0);
        }
    }

    /// The symbol of `text`, if held (takes no reference).
    pub fn get(&self, text: &str) -> Option<Sym> {
        self.ids.get(text).copied()
    }

    /// The string of `sym` (empty if it was released).
    pub fn text(&self, sym: Sym) -> &str {
        match self.slots.get(sym.0 as usize) {
            Some(Some(slot)) => &slot.text,
            _ => "",
        }
    }

    /// Distinct strings held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Gives back the memory of a table that shrank a lot (after a relist, say).
    pub fn shrink_to_fit(&mut self) {
        self.ids.shrink_to_fit();
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        let len = self.slots.len();
        self.free.retain(|&i| (i as usize) < len);
        self.slots.shrink_to_fit();
        self.free.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_is_stored_once_and_freed_with_its_last_holder() {
        let mut symbols = Symbols::default();
        let a = symbols.intern("tier");
        let b = symbols.intern("tier");
        let c = symbols.intern("apps");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!((symbols.len(), symbols.text(a)), (2, "tier"));
        assert_eq!(symbols.get("apps"), Some(c));
        symbols.release(a);
        assert_eq!(symbols.get("tier"), Some(a), "one holder left");
        symbols.release(b);
        assert_eq!(symbols.get("tier"), None);
        assert_eq!(symbols.text(a), "");
        assert_eq!(symbols.len(), 1);
    }

    #[test]
    fn freed_slots_are_reused_so_churn_does_not_grow_the_table() {
        let mut symbols = Symbols::default();
        for round in 0..100 {
            let held: Vec<Sym> = (0..50)
                .map(|i| symbols.intern(&format!("ns-{round}-{i}")))
                .collect();
            for sym in held {
                symbols.release(sym);
            }
        }
        assert!(symbols.len() == 0);
        assert!(symbols.slots.len() <= 50, "{} slots", symbols.slots.len());
        symbols.shrink_to_fit();
        assert!(symbols.slots.is_empty() && symbols.free.is_empty());
    }
}
