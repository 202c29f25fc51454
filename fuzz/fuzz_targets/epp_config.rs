//! Fuzz `blis convert epp-config` (llm-d EndpointPickerConfig YAML): any
//! input must convert or be refused with an error, never panic; what it
//! converts must be TOML.
#![no_main]

use blis_host::config::epp_config::convert;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((toml_text, _notes)) = convert(text) {
        if let Err(e) = toml::from_str::<toml::Table>(&toml_text) {
            panic!("converted text is not TOML: {e}\n{toml_text}");
        }
    }
});
