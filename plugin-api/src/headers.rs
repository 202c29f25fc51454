//! Request headers as a policy sees them (ABI 0.2, through the host's query
//! table, [`crate::host`]): the HTTP headers the client of the request being
//! decided sends with every request (`[[workload.clients]] headers = { … }`
//! in the run file), matched by name case-insensitively as HTTP does. llm-d's
//! predicted-latency plugins read their SLO targets from them
//! (`x-llm-d-slo-ttft-ms`, `x-llm-d-slo-tpot-ms`); a policy of yours may key
//! on any header a real client would send.
//!
//! The answer exists while the host decides the request (admission,
//! routing, the P/D decider) and in the `observe` calls right after; for
//! any other request, for a header the client does not send, and in a host
//! too old to answer, there is none.
//!
//! ```
//! use blis_plugin_api::{headers, RequestView};
//!
//! /// The request's TTFT target in ms, if its client sends one.
//! fn ttft_slo_ms(req: &RequestView<'_>) -> Option<f64> {
//!     headers::request_header(req, "x-llm-d-slo-ttft-ms")?.trim().parse().ok()
//! }
//! ```

use abi_stable::std_types::RStr;

use crate::host::host;
use crate::views::RequestView;

/// The value of header `name` (any case) that `req` carries, or `None` when
/// it carries none (or the host cannot say: see the module documentation).
pub fn request_header<'a>(req: &RequestView<'a>, name: &str) -> Option<&'a str> {
    let f = host()?.request_header()?;
    f(req.id, RStr::from(name))
        .into_option()
        .map(|v| v.as_str())
}
