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

pub use queue::{Event, EventQueue, Scheduled};

/// Simulated time: one tick is one microsecond.
pub type Tick = i64;

/// The largest representable horizon ("run until the work is done").
pub const NEVER: Tick = i64::MAX;
