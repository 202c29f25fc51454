//! The router's in-flight token count per instance, llm-d's
//! `inflight-load-producer` as its concurrency detector reads it in
//! `tokens` and `hybrid` mode: each routed request charges its chosen
//! instance with its uncached prompt tokens (the prompt less the leading
//! blocks that instance's KV cache holds at routing), released at the
//! request's first token, or when it finishes, is dropped or is sent back
//! to routing before one. Kept only in a run whose gateway detector counts
//! tokens (`Cluster::epp_tokens` is `None` otherwise).

use std::collections::HashMap;

/// Charged tokens per instance, and per request still charged.
#[derive(Debug, Default)]
pub struct EppTokens {
    per_instance: Vec<u64>,
    charged: HashMap<u64, (u32, u64)>,
}

impl EppTokens {
    /// A count over `n` instances.
    pub fn new(n: usize) -> Self {
        EppTokens {
            per_instance: vec![0; n],
            charged: HashMap::new(),
        }
    }

    /// Request `id` was routed to `instance` with `tokens` uncached.
    pub fn charge(&mut self, id: u64, instance: u32, tokens: u64) {
        let i = instance as usize;
        if i >= self.per_instance.len() {
            self.per_instance.resize(i + 1, 0);
        }
        self.per_instance[i] += tokens;
        if let Some((was, t)) = self.charged.insert(id, (instance, tokens)) {
            let n = &mut self.per_instance[was as usize];
            *n = n.saturating_sub(t);
        }
    }

    /// Request `id` saw its first token, finished, was dropped or left its
    /// instance: its tokens leave the count (nothing when already released).
    pub fn release(&mut self, id: u64) {
        if let Some((i, t)) = self.charged.remove(&id) {
            let n = &mut self.per_instance[i as usize];
            *n = n.saturating_sub(t);
        }
    }

    /// The tokens in flight per instance.
    pub fn per_instance(&self) -> &[u64] {
        &self.per_instance
    }
}

#[cfg(test)]
mod tests {
    use super::EppTokens;

    #[test]
    fn charges_and_releases_by_hand() {
        let mut e = EppTokens::new(2);
        e.charge(1, 0, 100);
        e.charge(2, 0, 50);
        e.charge(3, 1, 70);
        assert_eq!(e.per_instance(), &[150, 70]);
        e.release(1);
        e.release(1);
        assert_eq!(e.per_instance(), &[50, 70]);
        // Re-routed before its first token: charged where it goes now.
        e.charge(2, 1, 40);
        assert_eq!(e.per_instance(), &[0, 110]);
        e.release(2);
        e.release(3);
        assert_eq!(e.per_instance(), &[0, 0]);
    }
}
