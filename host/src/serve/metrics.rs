//! `/metrics` of `blis serve` in Prometheus' text format, with vLLM's
//! metric names and types: the gauges llm-d's data layer scrapes (requests
//! running and waiting, KV-cache usage) and the token and request counters.
//! Values are the simulated instance's at the scrape; the gateway's
//! endpoint sums its instances.

use std::fmt::Write;

use super::engine::{Histogram, Latencies, Snapshot};

/// An endpoint's gauges at a scrape: requests running and waiting, and the
/// KV cache's usage (0–1; the gateway's is its instances' mean).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gauges {
    pub running: f64,
    pub waiting: f64,
    pub kv_usage: f64,
}

/// The instances endpoint `instance` shows (`None`: the gateway, all).
fn picked(s: &Snapshot, instance: Option<u32>) -> Vec<usize> {
    match instance {
        Some(i) => vec![i as usize],
        None => (0..s.instances.len()).collect(),
    }
    .into_iter()
    .filter(|&i| i < s.instances.len())
    .collect()
}

/// Endpoint `instance`'s gauges (`None`: every instance's summed).
pub fn gauges(s: &Snapshot, instance: Option<u32>) -> Gauges {
    let pick = picked(s, instance);
    let sum = |f: &dyn Fn(usize) -> f64| pick.iter().map(|&i| f(i)).sum::<f64>();
    Gauges {
        running: sum(&|i| f64::from(s.instances[i].running)),
        waiting: sum(&|i| f64::from(s.instances[i].waiting)),
        kv_usage: sum(&|i| s.instances[i].kv_utilization) / pick.len().max(1) as f64,
    }
}

/// `vllm:lora_requests_info`'s labels for the instances `pick`: the names
/// of the adapters running and waiting (comma-separated, each once) and
/// the resident-adapter capacity (0 without `[lora]`).
fn lora_labels(s: &Snapshot, pick: &[usize], adapters: &[String]) -> (String, String, u32) {
    let (mut running, mut waiting, mut max) = (Vec::new(), Vec::new(), 0);
    for &i in pick {
        if let Some((r, w, cap)) = &s.instances[i].lora {
            running.extend(r.iter().copied());
            waiting.extend(w.iter().copied());
            max = max.max(*cap);
        }
    }
    let names = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v.iter()
            .filter_map(|&a| adapters.get(a as usize))
            .map(|n| n.replace(['"', '\\', '\n', ','], "_"))
            .collect::<Vec<_>>()
            .join(",")
    };
    (names(running), names(waiting), max)
}

/// The metrics text of instance `instance` (`None`: every instance summed);
/// `adapters` names the run's LoRA adapters.
pub fn render(model: &str, adapters: &[String], s: &Snapshot, instance: Option<u32>) -> String {
    let pick = picked(s, instance);
    let sum = |f: &dyn Fn(usize) -> f64| pick.iter().map(|&i| f(i)).sum::<f64>();
    let g = gauges(s, instance);
    let label = format!("model_name=\"{}\"", model.replace(['"', '\\', '\n'], "_"));
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name}{{{label}}} {value}");
    };
    metric(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        g.running,
    );
    metric(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        g.waiting,
    );
    metric(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        g.kv_usage,
    );
    metric(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "GPU KV-cache usage. 1 means 100 percent usage (the older name).",
        g.kv_usage,
    );
    metric(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemptions from the engine.",
        sum(&|i| s.instances[i].preemptions as f64),
    );
    let at = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0) as f64;
    metric(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        sum(&|i| at(&s.prompt_tokens, i)),
    );
    metric(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        sum(&|i| at(&s.generation_tokens, i)),
    );
    metric(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        sum(&|i| at(&s.completed, i)),
    );
    let mut lat = Latencies::default();
    for &i in &pick {
        if let Some(l) = s.latencies.get(i) {
            lat.ttft.merge(&l.ttft);
            lat.itl.merge(&l.itl);
            lat.e2e.merge(&l.e2e);
            lat.queue.merge(&l.queue);
        }
    }
    for (name, help, h) in [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &lat.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &lat.itl,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (the older name).",
            &lat.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &lat.e2e,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            &lat.queue,
        ),
    ] {
        histogram(&mut out, name, help, &label, h);
    }
    let _ = writeln!(
        out,
        "# HELP vllm:lora_requests_info Running stats on lora requests."
    );
    let _ = writeln!(out, "# TYPE vllm:lora_requests_info gauge");
    let (running, waiting, max_lora) = lora_labels(s, &pick, adapters);
    let _ = writeln!(
        out,
        "vllm:lora_requests_info{{max_lora=\"{max_lora}\",running_lora_adapters=\"{running}\",waiting_lora_adapters=\"{waiting}\"}} {}",
        s.wall_unix_s
    );
    out
}

/// One histogram in the text format: cumulative buckets, `+Inf`, sum, count.
fn histogram(out: &mut String, name: &str, help: &str, label: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut cum = 0;
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        cum += c;
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"{b:?}\"}} {cum}");
    }
    let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{label}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{label}}} {}", h.count);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::InstanceLoad;

    #[test]
    fn gauges_of_one_instance_and_of_the_gateway() {
        let load = |w, r, kv| InstanceLoad {
            waiting: w,
            running: r,
            kv_utilization: kv,
            preemptions: 1,
            lora: None,
        };
        let s = Snapshot {
            at: 2_000_000,
            instances: vec![load(3, 5, 0.5), load(1, 2, 0.25)],
            completed: vec![7, 1],
            prompt_tokens: vec![70, 10],
            generation_tokens: vec![700, 100],
            latencies: vec![Latencies::default(), Latencies::default()],
            wall_unix_s: 1.5e9,
        };
        let mut s = s;
        s.latencies[0].ttft.observe(0.03, 1);
        s.latencies[1].ttft.observe(0.07, 2);
        s.latencies[1].ttft.observe(9999.0, 1);
        // No [lora]: the info line is there, empty, with max_lora 0.
        assert!(render("m", &[], &s, Some(1)).contains(
            "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1500000000\n"
        ));
        // Adapters by name, each once; the gateway's are its instances'.
        s.instances[0].lora = Some((vec![0, 2], vec![1], 2));
        s.instances[1].lora = Some((vec![1], vec![], 4));
        let names = ["fin".to_string(), "law".to_string(), "med".to_string()];
        assert!(render("m", &names, &s, Some(0)).contains(
            "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"fin,med\",waiting_lora_adapters=\"law\"} 1500000000\n"
        ));
        assert!(render("m", &names, &s, None).contains(
            "{max_lora=\"4\",running_lora_adapters=\"fin,law,med\",waiting_lora_adapters=\"law\"}"
        ));
        let one = render("m", &[], &s, Some(1));
        assert!(
            one.contains("vllm:num_requests_waiting{model_name=\"m\"} 1\n"),
            "{one}"
        );
        assert!(one.contains("vllm:num_requests_running{model_name=\"m\"} 2\n"));
        assert!(one.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"));
        let all = render("m", &[], &s, None);
        assert!(
            all.contains("vllm:num_requests_waiting{model_name=\"m\"} 4\n"),
            "{all}"
        );
        assert!(all.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0.375\n"));
        assert!(all.contains("vllm:request_success_total{model_name=\"m\"} 8\n"));
        assert!(all.contains("# TYPE vllm:generation_tokens_total counter"));
        // Cumulative buckets: 0.03 in le=0.04, 0.07 twice in le=0.08;
        // 9999 s only in +Inf.
        let t = "vllm:time_to_first_token_seconds";
        let has = |text: &str, line: String| assert!(text.contains(&line), "{line} in\n{text}");
        has(
            &all,
            format!("{t}_bucket{{model_name=\"m\",le=\"0.02\"}} 0\n"),
        );
        has(
            &all,
            format!("{t}_bucket{{model_name=\"m\",le=\"0.04\"}} 1\n"),
        );
        has(
            &all,
            format!("{t}_bucket{{model_name=\"m\",le=\"0.08\"}} 3\n"),
        );
        has(
            &all,
            format!("{t}_bucket{{model_name=\"m\",le=\"2560.0\"}} 3\n"),
        );
        has(
            &all,
            format!("{t}_bucket{{model_name=\"m\",le=\"+Inf\"}} 4\n"),
        );
        has(&all, format!("{t}_count{{model_name=\"m\"}} 4\n"));
        has(
            &render("m", &[], &s, Some(0)),
            format!("{t}_count{{model_name=\"m\"}} 1\n"),
        );
    }
}
