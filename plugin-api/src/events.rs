//! ABI 0.2: request lifecycle events, delivered to the policies that ask for
//! them (see [`Hooks`](crate::Hooks)) in simulated-time order, each with the
//! cluster as it is at that time.

use abi_stable::StableAbi;

use crate::views::RequestView;

/// What happened to a request, as a stable one-byte code. Later ABI versions
/// add codes; a policy never receives a code it did not ask for.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKind(pub u8);

impl EventKind {
    /// Routed to `instance` (after every policy's `observe`).
    pub const DISPATCHED: EventKind = EventKind(0);
    /// The client saw its first token (`ttft_us` is set).
    pub const FIRST_TOKEN: EventKind = EventKind(1);
    /// Its last token reached the client (`ttft_us`, `e2e_us`,
    /// `output_tokens` are set).
    pub const COMPLETED: EventKind = EventKind(2);
    /// Refused by admission (`instance` is `u32::MAX`; `reason` is the
    /// admission policy's).
    pub const REJECTED: EventKind = EventKind(3);
    /// Dropped by `instance` as unservable (it can never fit).
    pub const DROPPED: EventKind = EventKind(4);

    /// The name used in traces and messages.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "dispatched",
            1 => "first_token",
            2 => "completed",
            3 => "rejected",
            4 => "dropped",
            _ => "unknown",
        }
    }
}

/// One lifecycle event of one request.
///
/// `request.block_hashes` is empty (the prompt's hashes are only kept until
/// routing); every other request field is set.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct RequestEvent<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The instance it concerns (`u32::MAX` for a rejection).
    pub instance: u32,
    /// Simulated time of the event, µs.
    pub time_us: i64,
    /// The request.
    pub request: RequestView<'a>,
    /// Time to first token, µs (−1 when not reached).
    pub ttft_us: i64,
    /// Arrival → last token, µs (−1 unless completed).
    pub e2e_us: i64,
    /// Output tokens the client has seen.
    pub output_tokens: u32,
    /// Reserved, always 0.
    pub reserved: u32,
}
