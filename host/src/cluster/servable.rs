//! Whether an arriving request could be served by any instance, asked
//! before any per-token work on it (hashing a 2^30-token prompt block by
//! block costs seconds and gigabytes, only for the request to be dropped).

use crate::instance::Instance;

/// One representative instance per distinct serving limit
/// (`max_model_len`, block size, KV blocks): a homogeneous cluster has one.
#[derive(Debug)]
pub struct ServableBound {
    representatives: Vec<Instance>,
}

impl ServableBound {
    /// The bound of a cluster made of `instances`.
    pub fn new(instances: &[Instance]) -> Self {
        let mut representatives: Vec<Instance> = Vec::new();
        for inst in instances {
            let c = inst.config();
            let seen = representatives.iter().any(|r| {
                let rc = r.config();
                (rc.max_model_len, rc.block_size, rc.total_kv_blocks)
                    == (c.max_model_len, c.block_size, c.total_kv_blocks)
            });
            if !seen {
                representatives.push(Instance::new(
                    inst.index(),
                    c.clone(),
                    inst.latency_model().clone(),
                ));
            }
        }
        ServableBound { representatives }
    }

    /// True if some instance can serve a request of these lengths (see
    /// [`Instance::can_serve`]).
    #[inline]
    pub fn admits(&self, input_len: u32, output_len: u32) -> bool {
        self.representatives
            .iter()
            .any(|r| r.can_serve(input_len, output_len))
    }
}
