//! How many pages one list of a workload cluster may take (docs/fleet.md, "Limits"). A list
//! is paged (`limit`, then `continue=` with the token of the page before), and a hostile
//! server can answer every page with one more `continue`: the watcher would list, and buffer
//! what it lists, without end. The layer every workload client is built with counts the pages
//! of each list as it sends them and refuses the one past `--fleet-max-list-pages` before it
//! is sent; the watcher then fails its list and starts again on its backoff, and the cluster
//! is reported ([`ListPages::refused`]) until that list completes.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use http::{Request, Uri};
use tower::{BoxError, Layer, Service};

/// Most pages of one list of a workload cluster (`--fleet-max-list-pages`). The watches ask
/// for 500 objects a page, so 1 000 pages are 500 000 Namespaces, labelled Secrets or
/// ServiceAccounts: well beyond the largest clusters Kubernetes is tested at (10 000
/// Namespaces, 150 000 Pods), while a server paging without end is cut off after at most
/// 1 000 requests (and 1 000 × `--fleet-max-response-bytes` read) per list.
pub const DEFAULT_MAX_LIST_PAGES: usize = 1_000;

/// Which list a request pages through: its path and selectors, without the parameters that
/// change from page to page or between a list and its watch.
fn list_of(uri: &Uri) -> (String, Page) {
    let mut key = uri.path().to_owned();
    let mut kind = Page::List;
    let mut first = true;
    for pair in uri.query().unwrap_or_default().split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "continue" if !value.is_empty() => kind = Page::Next,
            "watch" if value == "true" || value == "1" => return (key, Page::Watch),
            "labelSelector" | "fieldSelector" => {
                key.push(if first { '?' } else { '&' });
                first = false;
                key.push_str(pair);
            }
            _ => {}
        }
    }
    (key, kind)
}

/// What a request to a workload cluster is to the count of its list's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Page {
    /// The first page of a list (or any other read or write).
    List,
    /// A page after the first (`continue=`).
    Next,
    /// A watch: the list before it completed.
    Watch,
}

/// The pages of the lists in progress of one workload cluster.
#[derive(Debug)]
pub(super) struct PageCount {
    max: usize,
    /// By list ([`list_of`]): pages asked for so far.
    pages: HashMap<String, usize>,
    /// The lists cut off at the bound and not completed since: their paths, by list.
    refused: BTreeMap<String, String>,
}

impl PageCount {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            pages: HashMap::new(),
            refused: BTreeMap::new(),
        }
    }

    /// Counts the request to `uri`: an error when it would be the page past the bound of its
    /// list (which is then refused until it completes).
    fn admit(&mut self, uri: &Uri) -> Result<(), String> {
        let (list, kind) = list_of(uri);
        match kind {
            Page::List => {
                self.pages.insert(list, 1);
            }
            Page::Watch => {
                self.pages.remove(&list);
                self.refused.remove(&list);
            }
            Page::Next => {
                let pages = self.pages.entry(list.clone()).or_insert(1);
                if *pages >= self.max {
                    self.pages.remove(&list);
                    self.refused.insert(list, uri.path().to_owned());
                    return Err(self.reason(uri.path()));
                }
                *pages += 1;
            }
        }
        Ok(())
    }

    fn reason(&self, path: &str) -> String {
        format!(
            "refused: a list of {path} took more than {} pages (--fleet-max-list-pages); retrying",
            self.max
        )
    }

    /// Why the cluster's lists are refused, while one is.
    fn refused(&self) -> Option<String> {
        self.refused.values().next().map(|path| self.reason(path))
    }
}

/// The bound on the pages of each list of one workload cluster, shared by its client's layer
/// and the fleet, which reports the cluster while a list is refused.
#[derive(Clone, Debug)]
pub(super) struct ListPages(Arc<Mutex<PageCount>>);

impl ListPages {
    pub(super) fn new(max: usize) -> Self {
        Self(Arc::new(Mutex::new(PageCount::new(max))))
    }

    /// Why the cluster is not usable: a list of it was cut off at the bound and has not
    /// completed since.
    pub(super) fn refused(&self) -> Option<String> {
        self.0.lock().ok().and_then(|count| count.refused())
    }

    fn admit(&self, uri: &Uri) -> Result<(), String> {
        match self.0.lock() {
            Ok(mut count) => count.admit(uri),
            // Poisoned: nothing is counted any more, so nothing is let through.
            Err(_) => Err("refused: the count of list pages is lost".to_owned()),
        }
    }
}

impl<S> Layer<S> for ListPages {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            pages: self.clone(),
        }
    }
}

/// A workload client's service with [`ListPages`] in front.
#[derive(Clone)]
pub(super) struct Bounded<S> {
    inner: S,
    pages: ListPages,
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, B> Service<Request<B>> for Bounded<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if let Err(why) = self.pages.admit(request.uri()) {
            return Box::pin(std::future::ready(Err(why.into())));
        }
        let answer = self.inner.call(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn a_list_is_cut_off_at_the_page_past_the_bound_until_it_completes() {
        let mut count = PageCount::new(3);
        let first = uri("/api/v1/serviceaccounts?limit=500");
        let next = uri("/api/v1/serviceaccounts?limit=500&continue=abc");
        assert_eq!(count.admit(&first), Ok(()));
        assert_eq!(count.admit(&next), Ok(()));
        assert_eq!(count.admit(&next), Ok(()));
        let refused = count.admit(&next).err().unwrap_or_default();
        assert!(refused.contains("/api/v1/serviceaccounts"), "{refused}");
        assert!(refused.contains("more than 3 pages"), "{refused}");
        assert!(refused.contains("--fleet-max-list-pages"), "{refused}");
        assert_eq!(count.refused(), Some(refused));
        // The watcher starts the list again: counted from one, still reported.
        assert_eq!(count.admit(&first), Ok(()));
        assert_eq!(count.admit(&next), Ok(()));
        assert!(count.refused().is_some());
        // It completes (the watch starts): no longer reported.
        let watch = uri("/api/v1/serviceaccounts?watch=true&resourceVersion=7&timeoutSeconds=290");
        assert_eq!(count.admit(&watch), Ok(()));
        assert_eq!(count.refused(), None);
    }

    #[test]
    fn each_list_has_its_own_count() {
        let mut count = PageCount::new(2);
        let secrets = |c: &str| uri(&format!("/api/v1/secrets?labelSelector=a%3Db&limit=500{c}"));
        let namespaces = |c: &str| uri(&format!("/api/v1/namespaces?limit=500{c}"));
        let other_selector = uri("/api/v1/secrets?labelSelector=c&limit=500&continue=x");
        assert_eq!(count.admit(&secrets("")), Ok(()));
        assert_eq!(count.admit(&namespaces("")), Ok(()));
        assert_eq!(count.admit(&secrets("&continue=1")), Ok(()));
        assert_eq!(count.admit(&namespaces("&continue=1")), Ok(()));
        // Interleaved, each list keeps its own count: both are at the bound.
        assert!(count.admit(&secrets("&continue=2")).is_err());
        assert!(count.admit(&namespaces("&continue=2")).is_err());
        // Another selector is another list.
        assert_eq!(count.admit(&other_selector), Ok(()));
        // An empty continue is no next page; a plain read starts nothing new.
        let mut count = PageCount::new(1);
        assert_eq!(count.admit(&uri("/api/v1/namespaces?continue=")), Ok(()));
        assert_eq!(count.admit(&uri("/version")), Ok(()));
        assert!(count.admit(&namespaces("&continue=1")).is_err());
    }
}
