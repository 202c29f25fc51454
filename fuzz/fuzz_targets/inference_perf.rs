//! Fuzz `blis convert inference-perf`: any YAML must convert or be refused
//! with an error, never panic; and what it converts must read back as a
//! `[workload]` table.
#![no_main]

use blis_host::workload::{convert_inference_perf, WorkloadConfig};
use libfuzzer_sys::fuzz_target;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[allow(dead_code)]
    workload: WorkloadConfig,
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((toml_text, _notes)) = convert_inference_perf(text) {
        if let Err(e) = toml::from_str::<File>(&toml_text) {
            panic!("converted TOML does not read back: {e}\n{toml_text}");
        }
    }
});
