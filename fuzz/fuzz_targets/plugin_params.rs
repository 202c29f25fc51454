//! Fuzz plugin `params` parsing: the input is the params table's TOML text
//! handed to every standard policy's constructor through the plugin ABI
//! (what `[admission.params]`, `[routing.params]`, scorer, filter, picker,
//! scheduler and preemption params become). Each must build or refuse with
//! an error, never panic or abort.
#![no_main]

use blis_host::plugins::Registry;
use blis_plugin_api::KindCode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(params) = std::str::from_utf8(data) else {
        return;
    };
    let registry = Registry::standard();
    let policies: Vec<(KindCode, String)> = registry
        .libraries()
        .iter()
        .flat_map(|l| l.policies.iter().map(|p| (p.kind, p.name.clone())))
        .collect();
    for (kind, name) in policies {
        let _ = match kind {
            KindCode::ADMISSION => registry.admission(&name, params, 1).map(drop),
            KindCode::ROUTER => registry.router(&name, params, 1).map(drop),
            KindCode::SCORER => registry.scorer(&name, params, 1).map(drop),
            KindCode::FILTER => registry.filter(&name, params, 1).map(drop),
            KindCode::PICKER => registry.picker(&name, params, 1).map(drop),
            KindCode::SCHEDULER => registry.scheduler(&name, params, 1).map(drop),
            KindCode::PREEMPTION => registry.preemption(&name, params, 1).map(drop),
            _ => Ok(()),
        };
    }
});
