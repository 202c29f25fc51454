//! The book (`docs/src`): every command it shows runs, and every output it
//! quotes is what the real `blis` prints now, so its figures cannot drift.
//!
//! A chapter marks each shell block: ```` ```sh,checked ```` blocks are run
//! here, ```` ```sh,not-checked ```` blocks are not (installs, builds of a
//! plugin crate, a real server, a cluster; each says why in the chapter). A
//! checked block directly followed by a ```` ```text,output ```` block must
//! print exactly that on stdout (trailing spaces ignored); every checked
//! block must exit 0. The blocks of a chapter run in order, with `bash -e -o
//! pipefail`, in one scratch folder holding a copy of `examples/` and
//! `tests/data/`, with the
//! `blis` under test first on `PATH` — as a reader runs them from the root
//! of a checkout. After every block those copies must be
//! unchanged and every new top-level entry must be one `.gitignore` covers
//! (`run/`, `sweep-out/`, `*.html`): the book's commands never write into
//! the tracked tree.
//!
//! The Python chapter's ```` ```python,checked ```` blocks are run the same
//! way by `docs/check_python.py`, in `.ci/run`'s Python step.
//!
//! When the simulator changes what it prints, regenerate the quoted outputs
//! (and read the diff): `BLIS_BOOK_REGENERATE=1 cargo test -p blis-tests book`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::util::{artifacts, TestDir};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

/// Top-level names a book command may create in the folder it runs from
/// (each covered by `.gitignore`).
const SCRATCH_DIRS: &[&str] = &["run", "sweep-out"];

/// The tracked folders a chapter's commands read, copied into its scratch
/// folder (and checked unchanged after every block).
const TRACKED: &[&str] = &["examples", "tests/data"];

/// A fenced code block of a chapter.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string's comma-separated words (`sh`, `checked`, …).
    info: Vec<String>,
    text: String,
    /// Line range of the body (0-based, end exclusive) in the file.
    body: (usize, usize),
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        if let Some(info) = l.strip_prefix("```") {
            let fence_len = 3 + info.chars().take_while(|c| *c == '`').count();
            let info = info.trim_start_matches('`');
            let start = i + 1;
            let mut j = start;
            while j < lines.len() {
                let t = lines[j].trim_start();
                if t.starts_with(&"`".repeat(fence_len)) && t.trim_matches('`').trim().is_empty() {
                    break;
                }
                j += 1;
            }
            let body: Vec<&str> = lines[start..j.min(lines.len())].to_vec();
            out.push(Block {
                line: i + 1,
                info: info
                    .split(',')
                    .map(|w| w.trim().to_string())
                    .filter(|w| !w.is_empty())
                    .collect(),
                text: body.join("\n"),
                body: (start, j),
            });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

fn has(b: &Block, word: &str) -> bool {
    b.info.iter().any(|w| w == word)
}

fn is_shell(b: &Block) -> bool {
    matches!(
        b.info.first().map(String::as_str),
        Some("sh" | "bash" | "console" | "shell")
    )
}

/// A checked command and the output block that follows it, if any.
struct Check<'a> {
    cmd: &'a Block,
    expected: Option<&'a Block>,
}

fn checks<'a>(file: &str, text: &str, bs: &'a [Block]) -> Vec<Check<'a>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (k, b) in bs.iter().enumerate() {
        if is_shell(b) {
            assert!(
                has(b, "checked") ^ has(b, "not-checked"),
                "{file}:{}: a shell block must say `checked` or `not-checked` in its info string (```sh,checked)",
                b.line
            );
        }
        if has(b, "output") {
            let prev = k.checked_sub(1).map(|p| &bs[p]);
            assert!(
                prev.is_some_and(|p| has(p, "checked")
                    && lines[p.body.1 + 1..b.line - 1]
                        .iter()
                        .all(|l| l.trim().is_empty())),
                "{file}:{}: an output block must directly follow a checked block",
                b.line
            );
        }
        // Shell blocks only: `python,checked` blocks are run by
        // docs/check_python.py against the installed wheel (.ci/run).
        if has(b, "checked") && is_shell(b) {
            let next = bs.get(k + 1).filter(|n| {
                has(n, "output")
                    && lines[b.body.1 + 1..n.line - 1]
                        .iter()
                        .all(|l| l.trim().is_empty())
            });
            out.push(Check {
                cmd: b,
                expected: next,
            });
        }
    }
    out
}

/// Every file under `dir` with its contents (to see what a command changed).
fn snapshot(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            snapshot(&p, out);
        } else {
            out.insert(p.clone(), std::fs::read(&p).unwrap_or_default());
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        let src = e.path();
        if src.is_dir() {
            // Build outputs of the example crates, not part of the tree.
            if name != "target" {
                copy_tree(&src, &to.join(&name));
            }
        } else {
            std::fs::copy(&src, to.join(&name)).unwrap();
        }
    }
}

fn normalise(s: &str) -> String {
    let lines: Vec<&str> = s.lines().map(str::trim_end).collect();
    lines.join("\n").trim_end().to_string()
}

fn have_jq() -> bool {
    Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Run the checked blocks of one chapter; regenerate its outputs on request.
fn check_chapter(file: &str) {
    let path = book_src().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let bs = blocks(&text);
    let cs = checks(file, &text, &bs);
    assert!(!cs.is_empty(), "{file}: no checked block");
    let regenerate = std::env::var_os("BLIS_BOOK_REGENERATE").is_some();
    let dir = TestDir::new(&format!("book_{}", file.trim_end_matches(".md")));
    let mut tracked = BTreeMap::new();
    for t in TRACKED {
        copy_tree(&repo().join(t), &dir.path().join(t));
        snapshot(&dir.path().join(t), &mut tracked);
    }
    let blis_dir = artifacts().blis().parent().unwrap().to_path_buf();
    let path_var = std::env::join_paths(std::iter::once(blis_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let jq = have_jq();
    let mut failures = Vec::new();
    let mut replacements: Vec<((usize, usize), String)> = Vec::new();
    for c in &cs {
        let at = format!("{file}:{}", c.cmd.line);
        if c.cmd.text.contains("jq ") && !jq {
            // CI installs jq (.ci/run); elsewhere say what was not run.
            assert!(
                std::env::var_os("CI").is_none(),
                "{at}: jq is not installed (apt-get install jq)"
            );
            eprintln!("{at}: skipped, jq is not installed (apt-get install jq)");
            continue;
        }
        let t0 = Instant::now();
        let o = Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", &c.cmd.text])
            .current_dir(dir.path())
            .env("PATH", &path_var)
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .expect("run bash");
        eprintln!("{at}: {:.2} s", t0.elapsed().as_secs_f64());
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() {
            failures.push(format!(
                "{at}: exit {:?}\n--- command\n{}\n--- stderr\n{stderr}",
                o.status.code(),
                c.cmd.text
            ));
            continue;
        }
        if let Some(e) = c.expected {
            let (want, got) = (normalise(&e.text), normalise(&stdout));
            if want != got {
                if regenerate {
                    replacements.push((e.body, got));
                } else {
                    failures.push(format!(
                        "{at}: the output differs from the book's (BLIS_BOOK_REGENERATE=1 rewrites it)\n--- command\n{}\n--- the book\n{want}\n--- blis now\n{got}",
                        c.cmd.text
                    ));
                }
            }
        }
        // Nothing tracked changed; new top-level entries are scratch only.
        let mut now = BTreeMap::new();
        for t in TRACKED {
            snapshot(&dir.path().join(t), &mut now);
        }
        if now != tracked {
            let changed: Vec<String> = now
                .keys()
                .chain(tracked.keys())
                .filter(|k| now.get(*k) != tracked.get(*k))
                .map(|k| k.strip_prefix(dir.path()).unwrap().display().to_string())
                .collect();
            failures.push(format!(
                "{at}: the commands wrote into the tracked tree: {changed:?}\n{}",
                c.cmd.text
            ));
            tracked = now;
        }
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if !TRACKED
                .iter()
                .any(|t| t.split('/').next() == Some(name.as_str()))
                && !SCRATCH_DIRS.contains(&name.as_str())
                && !name.ends_with(".html")
            {
                failures.push(format!(
                    "{at}: the commands created {name:?} at the top level: write into run/ or sweep-out/ (.gitignore covers them)"
                ));
            }
        }
    }
    if regenerate && !replacements.is_empty() {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        replacements.sort_by_key(|(r, _)| std::cmp::Reverse(r.0));
        for ((start, end), got) in replacements {
            lines.splice(start..end, got.lines().map(str::to_string));
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        eprintln!("{file}: quoted outputs regenerated");
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

macro_rules! chapters {
    ($($test:ident => $file:literal),* $(,)?) => {
        /// The chapters with checked blocks, one test each.
        const CHAPTERS: &[&str] = &[$($file),*];
        $(
            #[test]
            fn $test() {
                check_chapter($file);
            }
        )*
    };
}

chapters! {
    book_install => "install.md",
    book_compare_policies => "compare-policies.md",
    book_plugins => "plugins.md",
    book_wasm_plugins => "wasm-plugins.md",
    book_sweeps => "sweeps.md",
    book_plan => "plan.md",
    book_tune => "tune.md",
    book_pd => "pd.md",
    book_kv_offload => "kv-offload.md",
    book_control_plane => "control-plane.md",
    book_flow_control => "flow-control.md",
    book_traces => "traces.md",
    book_llm_d => "llm-d.md",
    book_lora => "lora.md",
    book_cli => "reference/cli.md",
    book_run_file => "reference/run-file.md",
    book_report => "reference/report.md",
}

/// Every chapter with a checked block has its test above; every chapter is
/// in SUMMARY.md; every shell block of every chapter is marked.
#[test]
fn book_every_chapter_with_commands_is_checked() {
    let summary = std::fs::read_to_string(book_src().join("SUMMARY.md")).unwrap();
    let mut files = Vec::new();
    fn md_files(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                md_files(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    md_files(&book_src(), &book_src(), &mut files);
    files.sort();
    for f in &files {
        if f == "SUMMARY.md" {
            continue;
        }
        assert!(
            summary.contains(&format!("({f})")),
            "{f} is not in SUMMARY.md"
        );
        let text = std::fs::read_to_string(book_src().join(f)).unwrap();
        let bs = blocks(&text);
        let n = checks(f, &text, &bs).len();
        assert_eq!(
            n > 0,
            CHAPTERS.contains(&f.as_str()),
            "{f}: a chapter has a test in tests/tests/book.rs exactly when it has checked blocks ({n})"
        );
    }
}

/// The folders and files the book's commands write are ignored by git.
#[test]
fn book_scratch_outputs_are_gitignored() {
    let gi = std::fs::read_to_string(repo().join(".gitignore")).unwrap();
    let lines: Vec<&str> = gi.lines().map(str::trim).collect();
    for want in ["/run/", "/sweep-out/", "/*.html"] {
        assert!(lines.contains(&want), ".gitignore lacks {want}");
    }
}

#[test]
fn book_parser_pairs_commands_with_outputs() {
    let text = "a\n```sh,checked\necho hi\n```\n\n```text,output\nhi\n```\n```sh,not-checked\ncargo x\n```\n````md\n```sh\n```\n````\n```sh,checked\ntrue\n```\n";
    let bs = blocks(text);
    assert_eq!(bs.len(), 5);
    let cs = checks("t.md", text, &bs);
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].cmd.text, "echo hi");
    assert_eq!(cs[0].expected.map(|e| e.text.as_str()), Some("hi"));
    assert!(cs[1].expected.is_none());
    assert_eq!(bs[3].text, "```sh\n```");
}

/// The README's quickstart quotes the book's first comparison: the same
/// commands and the same output, so it is checked with the book.
#[test]
fn book_readme_quickstart_is_the_books() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let chapter = std::fs::read_to_string(book_src().join("compare-policies.md")).unwrap();
    let (rb, cb) = (blocks(&readme), blocks(&chapter));
    let quick = rb
        .iter()
        .position(|b| {
            b.text
                .contains("examples/llm-d/workload.toml --routing-policy round-robin")
        })
        .expect("the README's quickstart");
    let first = cb.iter().position(|b| has(b, "checked")).unwrap();
    assert_eq!(rb[quick].text, cb[first].text, "the quickstart's commands");
    assert_eq!(
        rb[quick + 1].text,
        cb[first + 1].text,
        "the quickstart's output (the book's is checked)"
    );
}

/// Every relative Markdown link of the book and of the README names a file
/// that exists (mdbook 0.4 does not check them).
#[test]
fn book_links_resolve() {
    let mut pages: Vec<PathBuf> = vec![repo().join("README.md")];
    fn md_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                md_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    md_files(&book_src(), &mut pages);
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.contains(' ') {
                continue;
            }
            if !page.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
