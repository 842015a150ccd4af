//! A watch's list, as a cache follows it. A watcher lists before it watches, and lists again
//! after it loses its place (`Init`, an `InitApply` per object, `InitDone`). Every cache
//! cheiron keeps instead of a reflector store follows the same rule, written here once:
//!
//! - the objects of a list are gathered apart and replace what the cache held only when the
//!   list is complete, so readers never see half a list, and what the list no longer holds
//!   is gone at its end and not before;
//! - a list abandoned by a watch that starts again is dropped whole (handed back, so a cache
//!   can release what it interned for it);
//! - the cache is ready once its first list is complete, and stays ready through relists
//!   (it answers from the previous list meanwhile).
//!
//! A cache keeps its own set types and decides what to keep of an object; [`Relist::follow`]
//! tells it which of those steps an event is.

use kube::runtime::watcher;

/// The list in progress of one watch, if any, and whether one has completed.
#[derive(Debug)]
pub struct Relist<S> {
    gathering: Option<S>,
    listed: bool,
}

impl<S> Default for Relist<S> {
    fn default() -> Self {
        Self {
            gathering: None,
            listed: false,
        }
    }
}

/// What a cache does with one watch event (see [`Relist::follow`]).
#[derive(Debug)]
pub enum Step<'r, 'e, S, K> {
    /// A list begins; `abandoned` is what an unfinished one had gathered.
    Began {
        /// The set of a list the watch gave up on.
        abandoned: Option<S>,
    },
    /// An object of the list in progress: keep what the cache keeps of it in `set`.
    Listed(&'e K, &'r mut S),
    /// The list is complete: `set` replaces what the cache held.
    Complete(S),
    /// An object created or changed after the list.
    Applied(&'e K),
    /// An object deleted after the list.
    Deleted(&'e K),
}

impl<S: Default> Relist<S> {
    /// The step `event` is, gathering the list's objects apart from what the cache holds.
    pub fn follow<'r, 'e, K>(&'r mut self, event: &'e watcher::Event<K>) -> Step<'r, 'e, S, K> {
        match event {
            watcher::Event::Init => Step::Began {
                abandoned: self.gathering.replace(S::default()),
            },
            watcher::Event::InitApply(object) => {
                Step::Listed(object, self.gathering.get_or_insert_with(S::default))
            }
            watcher::Event::InitDone => {
                self.listed = true;
                Step::Complete(self.gathering.take().unwrap_or_default())
            }
            watcher::Event::Apply(object) => Step::Applied(object),
            watcher::Event::Delete(object) => Step::Deleted(object),
        }
    }

    /// The set of the list in progress, if one is.
    pub fn gathering_mut(&mut self) -> Option<&mut S> {
        self.gathering.as_mut()
    }

    /// True once a list has completed.
    pub fn is_listed(&self) -> bool {
        self.listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache as the rule above wants it: a set of names, replaced at the end of each list.
    #[derive(Default)]
    struct Names {
        held: Vec<&'static str>,
        relist: Relist<Vec<&'static str>>,
        abandoned: Vec<Vec<&'static str>>,
    }

    impl Names {
        fn apply(&mut self, event: &watcher::Event<&'static str>) {
            match self.relist.follow(event) {
                Step::Began { abandoned } => self.abandoned.extend(abandoned),
                Step::Listed(name, set) => set.push(name),
                Step::Complete(set) => self.held = set,
                Step::Applied(name) => self.held.push(name),
                Step::Deleted(name) => self.held.retain(|n| n != name),
            }
        }
    }

    #[test]
    fn a_list_replaces_the_set_at_its_end_and_an_abandoned_one_is_handed_back() {
        let mut names = Names::default();
        names.apply(&watcher::Event::Init);
        names.apply(&watcher::Event::InitApply("a"));
        assert!(names.held.is_empty() && !names.relist.is_listed());
        names.apply(&watcher::Event::InitApply("b"));
        names.apply(&watcher::Event::InitDone);
        assert_eq!(names.held, ["a", "b"]);
        assert!(names.relist.is_listed());
        names.apply(&watcher::Event::Apply("c"));
        names.apply(&watcher::Event::Delete("a"));
        assert_eq!(names.held, ["b", "c"]);

        // A relist the watch gives up on leaves nothing behind; the next one replaces all.
        names.apply(&watcher::Event::Init);
        names.apply(&watcher::Event::InitApply("x"));
        if let Some(set) = names.relist.gathering_mut() {
            set.push("y");
        }
        assert_eq!(
            names.held,
            ["b", "c"],
            "answers from the last list meanwhile"
        );
        assert!(names.relist.is_listed(), "still ready during a relist");
        names.apply(&watcher::Event::Init);
        assert_eq!(names.abandoned, [vec!["x", "y"]]);
        names.apply(&watcher::Event::InitApply("d"));
        names.apply(&watcher::Event::InitDone);
        assert_eq!(names.held, ["d"], "what the list does not hold is gone");
        assert!(names.relist.gathering_mut().is_none());
    }

    #[test]
    fn an_init_done_without_its_init_completes_an_empty_list() {
        let mut names = Names {
            held: vec!["old"],
            ..Names::default()
        };
        names.apply(&watcher::Event::InitDone);
        assert!(names.held.is_empty() && names.relist.is_listed());
    }
}
