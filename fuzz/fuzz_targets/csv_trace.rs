//! Fuzz the CSV trace reader: the validation pass and the replay pass of
//! any file must end in requests or an error naming the line, never panic.
//! At most 10,000 requests are replayed per input.
#![no_main]

use blis_host::request::Request;
use blis_host::workload::{Workload, WorkloadConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("blis-fuzz-csv-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() || std::fs::write(dir.join("t.csv"), data).is_err() {
        return;
    }
    let config = WorkloadConfig {
        trace: Some("t.csv".into()),
        ..WorkloadConfig::empty()
    };
    let Ok(mut w) = Workload::new(&config, 7, &dir) else {
        return;
    };
    let mut req = Request::default();
    for _ in 0..10_000 {
        if !w.pop_into(&mut req) {
            break;
        }
    }
});
