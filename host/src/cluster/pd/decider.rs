//! The disaggregation decider: whether a request's prefill runs on a
//! prefill instance (and its KV is transferred) or on its decode instance.
//! Asked after the decode instance is chosen (decode-first, as llm-d's
//! P/D scheduler does). The standard deciders are here; a plugin decider
//! (ABI kind `decider`) is called through [`PdDecider::Plugin`].

use crate::plugins::DeciderPolicy;

/// The standard deciders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decider {
    /// Never disaggregate (the pools serve whole requests).
    Never,
    /// Disaggregate every request.
    Always,
    /// Disaggregate when more than `threshold` prompt tokens are not cached
    /// on the chosen decode instance (GPU or CPU tier, read live).
    PrefixThreshold(u32),
    /// Disaggregate requests with multimodal input (llm-d's
    /// always-disagg-multimodal-decider).
    Multimodal,
}

impl Decider {
    /// The decider's run-file name.
    pub fn name(self) -> &'static str {
        match self {
            Decider::Never => "never",
            Decider::Always => "always",
            Decider::PrefixThreshold(_) => "prefix-threshold",
            Decider::Multimodal => "multimodal",
        }
    }

    /// Whether it ever needs the decode instance's cached prompt blocks.
    pub fn needs_cache_query(self) -> bool {
        matches!(self, Decider::PrefixThreshold(_))
    }

    /// Decide for a prompt of `input_len` tokens (with multimodal input or
    /// not) of which `cached_blocks` blocks of `block_size` tokens are
    /// cached on the decode instance.
    pub fn decide(
        self,
        input_len: u32,
        multimodal: bool,
        cached_blocks: u32,
        block_size: u32,
    ) -> bool {
        match self {
            Decider::Never => false,
            Decider::Always => true,
            Decider::Multimodal => multimodal,
            Decider::PrefixThreshold(threshold) => {
                let cached = u64::from(cached_blocks) * u64::from(block_size);
                let uncached = u64::from(input_len).saturating_sub(cached);
                input_len > 0 && uncached > u64::from(threshold)
            }
        }
    }
}

/// The run's decider: a standard one, or a plugin of kind `decider`.
pub enum PdDecider {
    Standard(Decider),
    Plugin(Box<DeciderPolicy>),
}

impl PdDecider {
    /// The name the report and the notes show: the standard name, or
    /// `library::name` of the plugin.
    pub fn name(&self) -> String {
        match self {
            PdDecider::Standard(d) => d.name().to_string(),
            PdDecider::Plugin(p) => format!("{}::{}", p.label().library, p.label().name),
        }
    }

    /// Whether the decode instance's cached prompt blocks are looked up
    /// (a plugin always receives them in its `PdView`).
    pub fn needs_cache_query(&self) -> bool {
        match self {
            PdDecider::Standard(d) => d.needs_cache_query(),
            PdDecider::Plugin(_) => true,
        }
    }

    /// Whether the decider may read the prompt's block hashes (a plugin).
    pub fn reads_block_hashes(&self) -> bool {
        match self {
            PdDecider::Standard(_) => false,
            PdDecider::Plugin(p) => p.label().block_hashes,
        }
    }

    /// Whether the per-instance prefix-cache query runs for the decider
    /// (a plugin that declares `PREFIX_QUERY`).
    pub fn needs_prefix_query(&self) -> bool {
        match self {
            PdDecider::Standard(_) => false,
            PdDecider::Plugin(p) => p.label().prefix_query,
        }
    }
}
