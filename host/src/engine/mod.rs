//! The event queue and the simulated clock.
//!
//! One queue serves the whole cluster. Its key is
//! `(time, class, instance index, insertion sequence)`, which gives exactly the
//! ordering rules of the cluster seed document:
//!
//! * cluster events at tick `T` run before instance events at `T`
//!   (and among cluster events: arrivals, then admissions, then routings);
//! * among instance events at `T`, the lowest instance index goes first;
//! * otherwise events run in the order they were scheduled (FIFO).
//!
//! Time is an integer count of microsecond ticks ([`Tick`]) and never goes
//! back: scheduling an event before the current clock is a programming error
//! and panics in debug builds (INV-3).
//!
//! The engine knows nothing about requests, plugins, TOML or JSON.

mod queue;

pub use queue::{Event, EventQueue, GatewayTimer, Scheduled};

/// Simulated time: one tick is one microsecond.
pub type Tick = i64;

/// The largest representable horizon ("run until the work is done").
pub const NEVER: Tick = i64::MAX;

/// Simulated time no run may reach: 2^62 µs, about 146,000 years. Every
/// time computed from a delay saturates instead of wrapping ([`later`]), so
/// a time at or past this limit is the sign that a delay or step time was
/// absurdly large; the cluster then ends the run with an error rather than
/// report times that wrapped around.
pub const TIME_LIMIT: Tick = 1 << 62;

/// `now + delay`, saturating at `i64::MAX` instead of wrapping (see
/// [`TIME_LIMIT`]).
#[inline]
pub fn later(now: Tick, delay: Tick) -> Tick {
    now.saturating_add(delay)
}
