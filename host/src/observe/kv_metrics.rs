//! `--scrape-kv-metrics` (spec §2.6): vLLM's Prometheus counters read
//! before and after the measured window; the hit rate is Δhits / Δqueries
//! summed over label series.
//!
//! Families, in order of preference:
//! * `vllm:kv_offload_tiering_block_hits` / `_block_queries` (source
//!   `tiered`; `_read_time` / `_write_time` give the totals' deltas);
//! * `vllm:gpu_prefix_cache_hits` / `_queries` (source
//!   `gpu-prefix-cache-fallback`), and vLLM V1's `vllm:prefix_cache_hits`
//!   / `_queries` under the same source (a blis addition).
//!
//! Each name is also accepted with the `_total` suffix Prometheus clients
//! add to counters. No family, zero queries, hits above queries or a
//! counter that went backwards: no block, and a warning saying why (a
//! server without `/metrics`, such as llama.cpp's, gets the warning too).

/// Where the counters came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSource {
    Tiered,
    GpuPrefixCacheFallback,
}

/// The observed KV hit rate over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct KvObserved {
    pub source: KvSource,
    pub hit_rate: f64,
    pub block_hits: f64,
    pub block_queries: f64,
    pub read_time_total: Option<f64>,
    pub write_time_total: Option<f64>,
}

/// The sum over label series of the samples of family `name` (or
/// `name_total`); `None` when the family has no sample.
pub fn family_sum(text: &str, name: &str) -> Option<f64> {
    let mut sum = 0.0;
    let mut seen = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let metric = &line[..end];
        if metric != name && metric.strip_suffix("_total") != Some(name) {
            continue;
        }
        // The value follows the labels (which may hold spaces in quotes).
        let rest = match line[end..].strip_prefix('{') {
            Some(r) => match label_end(r) {
                Some(i) => &r[i + 1..],
                None => continue,
            },
            None => &line[end..],
        };
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            if v.is_finite() {
                sum += v;
                seen = true;
            }
        }
    }
    seen.then_some(sum)
}

/// Index of the `}` closing a label set (quotes and escapes honoured).
fn label_end(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == '}' && !quoted {
            return Some(i);
        }
    }
    None
}

const TIERED: (&str, &str) = (
    "vllm:kv_offload_tiering_block_hits",
    "vllm:kv_offload_tiering_block_queries",
);
const FALLBACKS: [(&str, &str); 2] = [
    (
        "vllm:gpu_prefix_cache_hits",
        "vllm:gpu_prefix_cache_queries",
    ),
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
];

fn delta(before: &str, after: &str, name: &str) -> Option<f64> {
    Some(family_sum(after, name)? - family_sum(before, name).unwrap_or(0.0))
}

/// The hit rate between two scrapes, or why there is none.
pub fn observe(before: &str, after: &str) -> Result<KvObserved, String> {
    let (source, (hits_name, queries_name)) = if family_sum(after, TIERED.0).is_some() {
        (KvSource::Tiered, TIERED)
    } else if let Some(f) = FALLBACKS
        .iter()
        .find(|(h, _)| family_sum(after, h).is_some())
    {
        (KvSource::GpuPrefixCacheFallback, *f)
    } else {
        return Err(format!(
            "no {} or {} counters in the metrics",
            TIERED.0, FALLBACKS[0].0
        ));
    };
    let hits = delta(before, after, hits_name).unwrap_or(0.0);
    let queries = delta(before, after, queries_name)
        .ok_or_else(|| format!("{hits_name} is present but {queries_name} is not"))?;
    if hits < 0.0 || queries < 0.0 {
        return Err(format!(
            "{hits_name} or {queries_name} went backwards during the run (a server restart?)"
        ));
    }
    if queries == 0.0 {
        return Err(format!("{queries_name} did not move: no queries to rate"));
    }
    if hits > queries {
        return Err(format!(
            "{hits_name} grew more than {queries_name} ({hits} > {queries})"
        ));
    }
    let (read, write) = if source == KvSource::Tiered {
        (
            delta(before, after, "vllm:kv_offload_tiering_read_time"),
            delta(before, after, "vllm:kv_offload_tiering_write_time"),
        )
    } else {
        (None, None)
    };
    Ok(KvObserved {
        source,
        hit_rate: hits / queries,
        block_hits: hits,
        block_queries: queries,
        read_time_total: read,
        write_time_total: write,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_series_and_reads_labels_with_spaces() {
        let t = "# HELP vllm:gpu_prefix_cache_hits x\n\
                 # TYPE vllm:gpu_prefix_cache_hits counter\n\
                 vllm:gpu_prefix_cache_hits_total{model_name=\"a b}\",engine=\"0\"} 30.0\n\
                 vllm:gpu_prefix_cache_hits_total{model_name=\"c\"} 12 1700000000\n\
                 vllm:gpu_prefix_cache_hits_created 1.7e9\n\
                 vllm:gpu_prefix_cache_queries 100\n";
        assert_eq!(family_sum(t, "vllm:gpu_prefix_cache_hits"), Some(42.0));
        assert_eq!(family_sum(t, "vllm:gpu_prefix_cache_queries"), Some(100.0));
        assert_eq!(family_sum(t, "vllm:none"), None);
    }

    #[test]
    fn tiered_is_preferred_and_falls_back_to_the_gpu_prefix_cache() {
        let before = "vllm:gpu_prefix_cache_hits 10\nvllm:gpu_prefix_cache_queries 20\n";
        let after = "vllm:gpu_prefix_cache_hits 40\nvllm:gpu_prefix_cache_queries 80\n";
        let o = observe(before, after).unwrap();
        assert_eq!(o.source, KvSource::GpuPrefixCacheFallback);
        assert_eq!(
            (o.block_hits, o.block_queries, o.hit_rate),
            (30.0, 60.0, 0.5)
        );
        let after_t = format!(
            "{after}vllm:kv_offload_tiering_block_hits 3\nvllm:kv_offload_tiering_block_queries 4\n\
             vllm:kv_offload_tiering_read_time 1.5\n"
        );
        let o = observe(before, &after_t).unwrap();
        assert_eq!(o.source, KvSource::Tiered);
        assert_eq!(o.hit_rate, 0.75);
        assert_eq!(o.read_time_total, Some(1.5));
        assert_eq!(o.write_time_total, None);
    }

    #[test]
    fn unusable_counters_give_no_block() {
        let q = |h: u32, n: u32| {
            format!("vllm:gpu_prefix_cache_hits {h}\nvllm:gpu_prefix_cache_queries {n}\n")
        };
        assert!(observe(&q(0, 5), &q(0, 5))
            .unwrap_err()
            .contains("did not move"));
        assert!(observe(&q(5, 5), &q(9, 6))
            .unwrap_err()
            .contains("grew more"));
        assert!(observe(&q(5, 9), &q(4, 10))
            .unwrap_err()
            .contains("backwards"));
        assert!(observe("", "llamacpp:tokens 3\n")
            .unwrap_err()
            .contains("no vllm"));
    }
}
