//! Instance lifecycle: `pending` (waiting for its node) → `loading` →
//! `warming_up` → `active` → `draining` → `terminated`. Only `active` and
//! `warming_up` instances are routed to; a draining instance finishes what
//! it holds according to the drain policy and terminates when nothing
//! routed to it is left.

use blis_plugin_api::InstanceState;

use super::delay::Delay;
use crate::engine::Tick;

/// What a draining instance does with its wait queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainPolicy {
    /// Serve everything it holds, then terminate.
    Wait,
    /// Drop the waiting requests (counted as dropped); the running batch
    /// finishes.
    Immediate,
    /// Route the waiting requests that have not produced a token again, as
    /// if they had just been admitted; the rest is served.
    Redirect,
}

impl DrainPolicy {
    /// The run-file names.
    pub const NAMES: [&'static str; 3] = ["wait", "immediate", "redirect"];

    /// Parse a run-file name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "wait" => Some(DrainPolicy::Wait),
            "immediate" => Some(DrainPolicy::Immediate),
            "redirect" => Some(DrainPolicy::Redirect),
            _ => None,
        }
    }
}

/// `[lifecycle]`, resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lifecycle {
    pub loading_delay: Delay,
    pub warm_start_initial_instances: bool,
    pub warm_up_request_count: u32,
    pub drain_policy: DrainPolicy,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            loading_delay: Delay::default(),
            warm_start_initial_instances: true,
            warm_up_request_count: 0,
            drain_policy: DrainPolicy::Wait,
        }
    }
}

/// The life of one instance.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceLife {
    pub state: InstanceState,
    /// The node it runs on (with node pools).
    pub node: Option<u32>,
    /// When it was created (0 for the initial instances).
    pub created_at: Tick,
    /// When it first became routable.
    pub routable_at: Option<Tick>,
    pub draining_at: Option<Tick>,
    pub terminated_at: Option<Tick>,
    /// Requests still to route before `warming_up` becomes `active`.
    pub warm_up_left: u32,
}

impl InstanceLife {
    /// Pending, loading, warming up or active: neither draining nor
    /// terminated (what the autoscaler's bounds count).
    pub fn is_live(&self) -> bool {
        self.state != InstanceState::DRAINING && self.state != InstanceState::TERMINATED
    }

    /// A new instance in `state` at `at`.
    pub fn new(state: InstanceState, node: Option<u32>, at: Tick, warm_up: u32) -> Self {
        InstanceLife {
            state,
            node,
            created_at: at,
            routable_at: None,
            draining_at: None,
            terminated_at: None,
            warm_up_left: warm_up,
        }
    }

    /// The state after loading: warming up when warm-up requests are asked for.
    pub fn loaded_state(&self) -> InstanceState {
        if self.warm_up_left > 0 {
            InstanceState::WARMING_UP
        } else {
            InstanceState::ACTIVE
        }
    }

    /// Move to `to` at `at`; returns false (and changes nothing) for a
    /// transition the lifecycle does not have.
    pub fn go(&mut self, to: InstanceState, at: Tick) -> bool {
        use InstanceState as S;
        let ok = matches!(
            (self.state, to),
            (S::PENDING, S::LOADING)
                | (S::LOADING, S::WARMING_UP | S::ACTIVE)
                | (S::WARMING_UP, S::ACTIVE)
                | (S::ACTIVE | S::WARMING_UP, S::DRAINING)
                | (S::PENDING | S::LOADING | S::DRAINING, S::TERMINATED)
        );
        if !ok {
            return false;
        }
        if to.is_routable() && self.routable_at.is_none() {
            self.routable_at = Some(at);
        }
        match to {
            S::DRAINING => self.draining_at = Some(at),
            S::TERMINATED => self.terminated_at = Some(at),
            _ => {}
        }
        self.state = to;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use InstanceState as S;

    #[test]
    fn only_the_lifecycle_transitions_are_allowed() {
        let mut l = InstanceLife::new(S::PENDING, Some(0), 5, 2);
        assert!(!l.go(S::ACTIVE, 6), "pending cannot serve");
        assert!(l.go(S::LOADING, 7));
        assert_eq!(l.loaded_state(), S::WARMING_UP);
        assert!(l.go(S::WARMING_UP, 9));
        assert_eq!(l.routable_at, Some(9));
        assert!(l.go(S::ACTIVE, 12));
        assert_eq!(l.routable_at, Some(9));
        assert!(!l.go(S::LOADING, 13));
        assert!(!l.go(S::TERMINATED, 13), "an active instance drains first");
        assert!(l.go(S::DRAINING, 13));
        assert!(!l.go(S::ACTIVE, 14), "no way back");
        assert!(l.go(S::TERMINATED, 15));
        assert_eq!((l.draining_at, l.terminated_at), (Some(13), Some(15)));
        assert!(!l.go(S::ACTIVE, 16));
        assert_eq!(DrainPolicy::parse("redirect"), Some(DrainPolicy::Redirect));
        assert_eq!(DrainPolicy::parse("later"), None);
    }
}
