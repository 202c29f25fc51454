//! Output files (per-request results, decision trace): checked against each
//! other and against every input before anything is written, and written
//! atomically — into a temporary file in the destination's folder that is
//! renamed into place only when the run succeeded, so a crash or a failed
//! run never leaves a half file that looks whole (and never clobbers the
//! previous one).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use tempfile::{NamedTempFile, TempPath};

/// An output being written: its temporary file, renamed onto `path` by
/// [`PendingOutput::commit`]. Dropped without a commit, the temporary file
/// is removed.
#[derive(Debug)]
pub struct PendingOutput {
    temp: TempPath,
    path: PathBuf,
}

impl PendingOutput {
    /// Create the temporary file for `path` (in `path`'s folder, so the
    /// rename is atomic); returns the file to write and the pending output.
    pub fn create(path: &Path) -> io::Result<(File, PendingOutput)> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)?;
        let (file, temp) = NamedTempFile::into_parts(temp);
        Ok((
            file,
            PendingOutput {
                temp,
                path: path.to_path_buf(),
            },
        ))
    }

    /// Where the output goes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rename the (flushed) temporary file onto the destination.
    pub fn commit(self) -> io::Result<()> {
        let path = self.path;
        self.temp.persist(&path).map_err(|e| {
            io::Error::new(
                e.error.kind(),
                format!(
                    "cannot move the output into {}: {}",
                    path.display(),
                    e.error
                ),
            )
        })
    }
}

/// The identity of a path for comparison: the canonical path when it
/// exists, else its canonical folder joined with its file name, else the
/// path itself made absolute.
pub fn identity(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs,
    }
}

/// Check output paths (`(key, path)`) against each other and against every
/// input: the same file twice is an error naming both keys. An output that
/// is an existing folder is an error too.
pub fn check_paths(outputs: &[(&str, PathBuf)], inputs: &[(String, PathBuf)]) -> Vec<String> {
    let mut errors = Vec::new();
    let ids: Vec<PathBuf> = outputs.iter().map(|(_, p)| identity(p)).collect();
    for (i, (key, path)) in outputs.iter().enumerate() {
        if path.is_dir() {
            errors.push(format!(
                "{key} = {}: is a folder; give a file path",
                path.display()
            ));
            continue;
        }
        for (j, (other, _)) in outputs.iter().enumerate().take(i) {
            if ids[i] == ids[j] {
                errors.push(format!(
                    "{key} and {other} are the same file ({}); give each output its own path",
                    path.display()
                ));
            }
        }
        for (input, ipath) in inputs {
            if ids[i] == identity(ipath) {
                errors.push(format!(
                    "{key} = {} is also the input {input}; writing it would overwrite the input. Give the output another path",
                    path.display()
                ));
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("blis-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn committed_output_replaces_the_file_and_an_uncommitted_one_leaves_it() {
        let d = scratch("commit");
        let p = d.join("out.jsonl");
        std::fs::write(&p, "old\n").unwrap();
        let (mut f, pending) = PendingOutput::create(&p).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        drop(pending); // a failed run
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "temporary file removed"
        );
        let (mut f, pending) = PendingOutput::create(&p).unwrap();
        f.write_all(b"new\n").unwrap();
        // Until the commit the destination is untouched.
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
        pending.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    }

    #[test]
    fn outputs_may_not_be_each_other_or_an_input() {
        let d = scratch("paths");
        let run = d.join("run.toml");
        std::fs::write(&run, "").unwrap();
        let inputs = vec![("the run file".to_string(), run.clone())];
        // Different spellings of the same file.
        let same_run = d.join(".").join("run.toml");
        let e = check_paths(&[("output.results_path", same_run)], &inputs);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("output.results_path") && e[0].contains("the run file"),
            "{e:?}"
        );
        let e = check_paths(
            &[
                ("output.results_path", d.join("a.jsonl")),
                ("output.trace_path", d.join("a.jsonl")),
            ],
            &inputs,
        );
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("same file"), "{e:?}");
        assert!(check_paths(
            &[
                ("output.results_path", d.join("a.jsonl")),
                ("output.trace_path", d.join("b.jsonl")),
            ],
            &inputs
        )
        .is_empty());
        let e = check_paths(&[("output.trace_path", d.clone())], &inputs);
        assert!(e[0].contains("folder"), "{e:?}");
    }
}
