//! Multi-turn sessions as a policy sees them (ABI 0.2, through the host's
//! query table, [`crate::host`]): the session of the request being decided,
//! a number shared by every round of one conversation of the workload (a
//! client with `[clients.session]`, or a trace's session column) and by no
//! other request. llm-d's session-affinity plugins key on it where a real
//! client sends a session header.
//!
//! The answer exists while the host decides the request (admission,
//! routing, the P/D decider) and in the `observe` calls right after; for
//! any other request, for a request outside a session, and in a host too
//! old to answer, there is no session.
//!
//! ```
//! use blis_plugin_api::{session, RequestView};
//!
//! /// The session of `req`, as text for a log line.
//! fn label(req: &RequestView<'_>) -> String {
//!     session::request_session(req).map_or("none".into(), |s| s.to_string())
//! }
//! ```

use crate::host::{host, NO_SESSION};
use crate::views::RequestView;

/// The session of `req`, or `None` when it belongs to none (or the host
/// cannot say: see the module documentation).
pub fn request_session(req: &RequestView<'_>) -> Option<u64> {
    let f = host()?.request_session()?;
    let s = f(req.id);
    (s != NO_SESSION).then_some(s)
}
