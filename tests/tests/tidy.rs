//! Project conventions checked as ordinary tests: every Rust source file
//! opens with a `//!` header saying what it is for (style: "every lib.rs and
//! module opens with a //! header"), and tests use neither the ignore nor
//! the should-panic attribute (a test that is skipped or expects a crash proves nothing
//! about behaviour).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_source_file_has_a_header_and_no_skipped_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for d in [
        "host",
        "plugin-api",
        "plugins",
        "examples",
        "tests",
        "python",
    ] {
        rust_files(&root.join(d), &mut files);
    }
    assert!(files.len() > 30, "found only {} files", files.len());
    let mut bad = Vec::new();
    let ignore = ["#[", "ignore]"].concat();
    let should_panic = ["#[", "should_panic"].concat();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        if !text.starts_with("//!") {
            bad.push(format!("{}: does not start with a //! header", f.display()));
        }
        if text.contains(&ignore) || text.contains(&should_panic) {
            bad.push(format!(
                "{}: uses an ignore or should-panic test attribute",
                f.display()
            ));
        }
    }
    assert!(bad.is_empty(), "convention violations:\n{}", bad.join("\n"));
}
