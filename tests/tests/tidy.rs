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

/// The Rust files under `dir` (relative to the workspace root).
fn sources(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(&root.join(dir), &mut files);
    files.sort();
    files
}

/// `line` names `path` as a whole path segment (`super::cli` yes,
/// `super::client` no).
fn names_path(line: &str, path: &str) -> bool {
    line.match_indices(path).any(|(i, _)| {
        !line[i + path.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn a_path_is_named_as_a_whole_segment() {
    assert!(names_path("use crate::cli::Failure;", "crate::cli"));
    assert!(names_path("crate::cli", "crate::cli"));
    assert!(!names_path("use super::client::Call;", "super::cli"));
    assert!(!names_path("crate::cli_tools", "crate::cli"));
}

/// Layering: `cli` is the top layer. Only `host/src/cli/` and
/// `host/src/main.rs` may name it; the library (`fit`, `observe`, the sweep
/// executor, …) and the Python extension go through `session`, the
/// library's entry point. An import of `cli` from below would make the
/// command layer the library's entry point again.
#[test]
fn nothing_below_the_command_line_imports_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cli = root.join("host/src/cli");
    let main = root.join("host/src/main.rs");
    let mut files = sources("host/src");
    files.extend(sources("python/src"));
    files.extend(sources("plugins"));
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut bad = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&cli) && **f != main) {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if ["crate::cli", "blis_host::cli", "super::cli"]
                .iter()
                .any(|p| names_path(line, p))
            {
                bad.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "only host/src/cli/ and host/src/main.rs may name the cli module; use blis_host::session instead:\n{}",
        bad.join("\n")
    );
}

/// `cli` is the clap layer: no module below it parses flags (a command's
/// flags are a clap struct in `cli/` mapped to the library's plain
/// description, so the Python package and embedders never build clap
/// structs).
#[test]
fn only_the_command_line_uses_clap() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let cli = root.join("host/src/cli");
    let main = root.join("host/src/main.rs");
    let mut bad = Vec::new();
    for f in sources("host/src")
        .iter()
        .filter(|f| !f.starts_with(&cli) && **f != main)
    {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if names_path(code, "clap") && (code.contains("clap::") || code.starts_with("use clap"))
                || code.starts_with("#[arg(")
                || code.starts_with("#[command(")
            {
                bad.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "clap belongs to host/src/cli/ (map the flags to the library's own options there):\n{}",
        bad.join("\n")
    );
}

/// The longest a function may be, in lines from `fn` to its closing brace.
/// A function longer than a screen or two cannot be read top-down: split it
/// into named steps (ARCHITECTURE.md, "Conventions").
const MAX_FUNCTION_LINES: usize = 150;

/// Collects the functions longer than [`MAX_FUNCTION_LINES`], skipping test
/// code (`#[test]` functions and `#[cfg(test)]` modules).
struct LongFunctions<'a> {
    file: &'a Path,
    found: Vec<String>,
}

fn is_test_code(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let p = a.path();
        if p.is_ident("test") {
            return true;
        }
        if p.is_ident("cfg") {
            let mut test = false;
            let _ = a.parse_nested_meta(|m| {
                test |= m.path.is_ident("test");
                Ok(())
            });
            return test;
        }
        false
    })
}

impl LongFunctions<'_> {
    fn check(&mut self, name: &syn::Ident, sig_line: usize, block: &syn::Block) {
        let end = block.brace_token.span.close().end().line;
        let lines = end + 1 - sig_line;
        if lines > MAX_FUNCTION_LINES {
            self.found.push(format!(
                "{}:{sig_line}: fn {name} is {lines} lines",
                self.file.display()
            ));
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for LongFunctions<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_code(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_code(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, f.sig.fn_token.span.start().line, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_code(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, f.sig.fn_token.span.start().line, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(b) = &f.default {
            self.check(&f.sig.ident, f.sig.fn_token.span.start().line, b);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The files of modules declared `#[cfg(test)] mod x;` (in `x.rs` or the
/// folder `x/` beside the declaring module's file): test code.
fn test_module_paths(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(file) = syn::parse_file(&text) else {
            continue;
        };
        let stem = f.file_stem().unwrap().to_string_lossy();
        let dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
            f.parent().unwrap().to_path_buf()
        } else {
            f.with_extension("")
        };
        for item in &file.items {
            if let syn::Item::Mod(m) = item {
                if m.content.is_none() && is_test_code(&m.attrs) {
                    let name = m.ident.to_string();
                    out.push(dir.join(format!("{name}.rs")));
                    out.push(dir.join(name));
                }
            }
        }
    }
    out
}

/// No function of the simulator (`host/src`) or the plugin API
/// (`plugin-api/src`) is longer than [`MAX_FUNCTION_LINES`]; test code
/// aside: files `tests.rs`, `*_tests.rs`, `tests/` folders, modules declared
/// `#[cfg(test)]` (e.g. the hardening campaign), `#[test]` functions.
#[test]
fn no_function_is_longer_than_the_limit() {
    use syn::visit::Visit;
    let mut files = sources("host/src");
    files.extend(sources("plugin-api/src"));
    let test_modules = test_module_paths(&files);
    assert!(
        test_modules.iter().any(|p| p.ends_with("campaign")),
        "the test-only module campaign was not found: {test_modules:?}"
    );
    let mut long = Vec::new();
    let mut measured = 0;
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        let in_tests_dir = f.components().any(|c| c.as_os_str() == "tests");
        let in_test_module = test_modules.iter().any(|m| f.starts_with(m));
        if name == "tests.rs" || name.ends_with("_tests.rs") || in_tests_dir || in_test_module {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let file = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: syn cannot parse it: {e}", f.display()));
        let mut v = LongFunctions {
            file: f,
            found: Vec::new(),
        };
        v.visit_file(&file);
        long.extend(v.found);
        measured += 1;
    }
    assert!(measured > 100, "measured only {measured} files");
    assert!(
        long.is_empty(),
        "{} functions are longer than {MAX_FUNCTION_LINES} lines; split each into named steps:\n{}",
        long.len(),
        long.join("\n")
    );
}

/// The measurement itself: a function of known length is measured exactly,
/// a test module is skipped.
#[test]
fn function_length_is_measured_from_fn_to_the_closing_brace() {
    use syn::visit::Visit;
    let body: String = (0..MAX_FUNCTION_LINES - 1)
        .map(|i| format!("    let _x{i} = {i};\n"))
        .collect();
    // `fn` line + body + closing brace = MAX + 1 lines.
    let text = format!(
        "//! x\nfn long() {{\n{body}}}\nfn short() {{}}\n#[cfg(test)]\nmod tests {{ fn t() {{\n{body}{body}}} }}\n"
    );
    let file = syn::parse_file(&text).unwrap();
    let path = PathBuf::from("x.rs");
    let mut v = LongFunctions {
        file: &path,
        found: Vec::new(),
    };
    v.visit_file(&file);
    assert_eq!(
        v.found,
        vec![format!(
            "x.rs:2: fn long is {} lines",
            MAX_FUNCTION_LINES + 1
        )]
    );
}
