//! Logging and decision reasons for plugin authors.
//!
//! * [`log`] writes one line to stderr, prefixed with `[library::policy]`
//!   (the policy whose call is running). Each policy may write
//!   [`LOG_LINES_PER_POLICY`] lines; the next call writes one line saying
//!   that further lines are suppressed, and later calls write nothing, so a
//!   line logged per request cannot flood a run of millions of requests.
//! * [`reason`] gives the reason of the decision being made: an admission
//!   policy calls it before rejecting, a filter before removing candidates.
//!   blis records it in the decision trace (`"reason"` of the admission
//!   record, of the filter's entry in `"filtered"`), and asks for it only
//!   when a trace is written. A reason is cleared at the start of every
//!   `admit` and `filter` call.
//!
//! Both are plain function calls on the plugin's side of the ABI: nothing
//! crosses into the host until blis asks for a reason.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Display;
use std::sync::{Mutex, OnceLock};

/// Lines each policy may [`log`] before the rest are suppressed.
pub const LOG_LINES_PER_POLICY: u32 = 20;

static LIBRARY: OnceLock<&'static str> = OnceLock::new();
static LINES: Mutex<Option<HashMap<&'static str, u32>>> = Mutex::new(None);

thread_local! {
    /// Name of the policy whose call is running ("" outside calls).
    static POLICY: Cell<&'static str> = const { Cell::new("") };
    /// The reason given during the current `admit` or `filter` call.
    static REASON: RefCell<Option<Cow<'static, str>>> = const { RefCell::new(None) };
}

/// Write `message` to stderr as `[library::policy] message` (rate-limited:
/// see the module documentation). Call it from inside a policy's methods.
pub fn log(message: impl Display) {
    let policy = POLICY.with(Cell::get);
    let library = LIBRARY.get().copied().unwrap_or("plugin");
    let n = {
        let mut lines = LINES.lock().unwrap_or_else(|e| e.into_inner());
        let n = lines
            .get_or_insert_with(HashMap::new)
            .entry(policy)
            .or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    if n <= LOG_LINES_PER_POLICY {
        eprintln!("[{library}::{policy}] {message}");
    } else if n == LOG_LINES_PER_POLICY + 1 {
        eprintln!(
            "[{library}::{policy}] logged {LOG_LINES_PER_POLICY} lines; further log lines of \
             this policy are suppressed"
        );
    }
}

/// Give the reason of the decision being made (an admission rejection, the
/// candidates a filter removes); blis records it in the decision trace. A
/// later call in the same decision replaces it.
pub fn reason(text: impl Into<Cow<'static, str>>) {
    REASON.with(|r| *r.borrow_mut() = Some(text.into()));
}

/// Record the library's name for the log prefix (first call wins).
pub(crate) fn set_library(name: &'static str) {
    let _ = LIBRARY.set(name);
}

/// Run `f` as a call of policy `name`: [`log`] names it.
#[inline]
pub(crate) fn as_policy<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let previous = POLICY.with(|p| p.replace(name));
    let out = f();
    POLICY.with(|p| p.set(previous));
    out
}

/// Forget any reason (at the start of an `admit` or `filter` call).
#[inline]
pub(crate) fn clear_reason() {
    REASON.with(|r| {
        if r.borrow().is_some() {
            *r.borrow_mut() = None;
        }
    });
}

/// The reason given since the last [`clear_reason`], taken.
pub(crate) fn take_reason() -> Option<Cow<'static, str>> {
    REASON.with(|r| r.borrow_mut().take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_taken_once_and_cleared() {
        clear_reason();
        assert_eq!(take_reason(), None);
        reason("bucket empty");
        reason(format!("bucket empty: {} < {}", 1, 2));
        assert_eq!(take_reason().as_deref(), Some("bucket empty: 1 < 2"));
        assert_eq!(take_reason(), None);
        reason("stale");
        clear_reason();
        assert_eq!(take_reason(), None);
    }

    #[test]
    fn log_counts_lines_per_policy() {
        as_policy("log-counter-test", || {
            for k in 0..LOG_LINES_PER_POLICY + 5 {
                log(format_args!("line {k}"));
            }
        });
        let lines = LINES.lock().unwrap();
        assert_eq!(
            lines.as_ref().unwrap()["log-counter-test"],
            LOG_LINES_PER_POLICY + 5
        );
    }
}
