//! One measured figure of the scale benchmark.

use serde_json::Value;

/// One measured figure: its key in the results file, what it is, the value as printed, the
/// target, and whether the target is met (if it has one).
pub struct Row {
    pub(crate) key: String,
    pub(crate) metric: String,
    pub(crate) value: String,
    pub(crate) number: Value,
    pub(crate) target: String,
    pub(crate) met: Option<bool>,
}

impl Row {
    /// A figure without a target.
    pub fn info(key: &str, metric: String, value: String, number: impl Into<Value>) -> Self {
        Self {
            key: key.to_owned(),
            metric,
            value,
            number: number.into(),
            target: "—".to_owned(),
            met: None,
        }
    }

    /// A figure with a target.
    pub fn target(mut self, target: &str, met: bool) -> Self {
        self.target = target.to_owned();
        self.met = Some(met);
        self
    }
}
