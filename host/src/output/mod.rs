//! The one place a blis command writes files (per-request results, decision
//! traces, time series, sweep manifests and tables, HTML reports — and every
//! later command's outputs). Every output is checked against every input and
//! every other output before anything runs, and written atomically: into a
//! temporary file in the destination's folder that is renamed into place
//! only when the command succeeded, so a crash, a failed run or an interrupt
//! never leaves a half file that looks whole, and never clobbers the
//! previous one.
//!
//! # API
//!
//! * [`check_paths`]`(outputs, inputs)` — before any work: one message per
//!   problem, naming the key. Refused: an empty path, a folder, a
//!   destination that is not a regular file (a FIFO, a device, a socket),
//!   an output that is another output or an input. Files are compared by
//!   their resolved path and by inode, so `a`, `./a`, a symlink to `a` and
//!   a hard link of `a` are all `a`.
//! * [`PendingOutput::create`]`(path)` → `(File, PendingOutput)`: write the
//!   file, then [`PendingOutput::commit`] puts it in place; dropped without
//!   a commit (a failed run), the temporary file is removed.
//! * [`write_atomic`]`(path, bytes)`: both at once, for a file written whole.
//! * [`same_file`]`(a, b)`: the comparison [`check_paths`] makes.
//! * [`install_interrupt_cleanup`]: called once at the start of `main`. On
//!   SIGINT, SIGTERM or SIGHUP every temporary output not yet committed (and
//!   every folder registered with [`register_temp_dir`]) is removed, and
//!   the process exits with 128 + the signal number (130 for Ctrl-C).
//! * [`GracefulStop::begin`]: a command that records as it goes (observe,
//!   sweep, plan, tune) holds one while it works. The first signal then
//!   only sets its [`GracefulStop::flag`] (stop starting work, finish or
//!   drain what is in flight, write what was recorded, exit 130); a second
//!   sets [`hurry_requested`] (stop waiting, write now); a third quits
//!   at once as above. Only SIGINT (Ctrl-C) is graceful: SIGTERM and
//!   SIGHUP end the process at once.
//! * [`is_temp_name`]: whether a file name is one of our temporary files,
//!   so the owner of a folder (a sweep) can remove those a SIGKILL left.
//!
//! # Rules
//!
//! * A symlink at the destination is followed deliberately (through every
//!   level, dangling or not): its final target is replaced atomically in the
//!   target's own folder and the link stays a link.
//! * A destination that exists and is not a regular file is refused (by
//!   [`check_paths`] and again by [`PendingOutput::create`]): renaming over
//!   it would replace a device or FIFO with a regular file.
//! * Modes: a new file gets `0666 & !umask`, like any file a program creates
//!   (the kernel applies the umask); a file that is replaced keeps its mode.
//! * Temporary files are `.NAME.PID-N.tmp` in the destination's folder.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Symlink levels followed before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Follow symlinks at `p` (through every level, even to a target that does
/// not exist yet) to the path that is really written.
pub fn destination(p: &Path) -> io::Result<PathBuf> {
    let mut cur = p.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&cur)?;
                cur = match cur.parent() {
                    Some(d) => d.join(target),
                    None => target,
                };
            }
            _ => return Ok(cur),
        }
    }
    Err(io::Error::other(format!(
        "{}: too many levels of symbolic links",
        p.display()
    )))
}

/// What kind of non-regular file `p` (after symlinks) is, if it exists and
/// is not a regular file.
fn special_kind(p: &Path) -> Option<&'static str> {
    let m = std::fs::metadata(p).ok()?;
    let t = m.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a folder");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// The identity of a path for comparison.
struct Identity {
    /// The resolved path: canonical when it exists, else its canonical
    /// folder joined with its file name, else the path made absolute.
    path: PathBuf,
    /// Device and inode, when the file exists.
    inode: Option<(u64, u64)>,
}

fn identity(p: &Path) -> Identity {
    let p = destination(p).unwrap_or_else(|_| p.to_path_buf());
    #[cfg(unix)]
    let inode = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&p).ok().map(|m| (m.dev(), m.ino()))
    };
    #[cfg(not(unix))]
    let inode = None;
    let path = if let Ok(c) = p.canonicalize() {
        c
    } else {
        let abs = std::path::absolute(&p).unwrap_or_else(|_| p.clone());
        match (abs.parent(), abs.file_name()) {
            (Some(dir), Some(name)) => dir
                .canonicalize()
                .map(|d| d.join(name))
                .unwrap_or(abs.clone()),
            _ => abs,
        }
    };
    Identity { path, inode }
}

impl Identity {
    fn same(&self, other: &Identity) -> bool {
        self.path == other.path || (self.inode.is_some() && self.inode == other.inode)
    }
}

/// Whether `a` and `b` name the same file (by resolved path or inode).
pub fn same_file(a: &Path, b: &Path) -> bool {
    identity(a).same(&identity(b))
}

/// Whether `p` (resolved) lies inside the folder `dir` (resolved).
pub fn inside(p: &Path, dir: &Path) -> bool {
    identity(p).path.starts_with(identity(dir).path)
}

/// Check output paths (`(key, path)`) against each other and against every
/// input (`(name, path)`): see the module docs for what is refused. Returns
/// one message per problem (empty when none).
pub fn check_paths(outputs: &[(&str, PathBuf)], inputs: &[(String, PathBuf)]) -> Vec<String> {
    let mut errors = Vec::new();
    let ids: Vec<Identity> = outputs.iter().map(|(_, p)| identity(p)).collect();
    let input_ids: Vec<Identity> = inputs.iter().map(|(_, p)| identity(p)).collect();
    for (i, (key, path)) in outputs.iter().enumerate() {
        if path.as_os_str().is_empty() {
            errors.push(format!(
                "{key} is empty: give a file path, or remove the key to write no file"
            ));
            continue;
        }
        if let Err(e) = check_destination(key, path) {
            errors.push(e);
            continue;
        }
        for (j, (other, _)) in outputs.iter().enumerate().take(i) {
            if !outputs[j].1.as_os_str().is_empty() && ids[i].same(&ids[j]) {
                errors.push(format!(
                    "{key} and {other} are the same file ({}); give each output its own path",
                    path.display()
                ));
            }
        }
        for ((input, _), id) in inputs.iter().zip(&input_ids) {
            if ids[i].same(id) {
                errors.push(format!(
                    "{key} = {} is also the input {input}; writing it would overwrite the input. Give the output another path",
                    path.display()
                ));
            }
        }
    }
    errors
}

/// `Err` naming `key` if `path` (after symlinks) exists and is not a
/// regular file.
fn check_destination(key: &str, path: &Path) -> Result<(), String> {
    let dest = destination(path).map_err(|e| format!("{key} = {}: {e}", path.display()))?;
    match special_kind(&dest) {
        None => Ok(()),
        Some("a folder") => Err(format!(
            "{key} = {}: is a folder; give a file path",
            path.display()
        )),
        Some(kind) => Err(format!(
            "{key} = {}: is {kind}, not a regular file. blis writes its outputs as whole regular files (atomically, by renaming); give a regular file path",
            path.display()
        )),
    }
}

// ---- temporary files and the interrupt cleanup ----

/// Temporary outputs and folders not yet committed, removed on an interrupt.
static TEMPS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT_TEMP: AtomicU64 = AtomicU64::new(0);

fn temps() -> std::sync::MutexGuard<'static, Vec<(u64, PathBuf)>> {
    TEMPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A registered temporary path: removed by the interrupt cleanup until
/// this guard is dropped.
#[derive(Debug)]
pub struct TempGuard(u64);

impl Drop for TempGuard {
    fn drop(&mut self) {
        temps().retain(|(id, _)| *id != self.0);
    }
}

/// Register a folder the interrupt cleanup removes (with its contents)
/// while the returned guard lives: a sweep's staging folder.
pub fn register_temp_dir(dir: &Path) -> TempGuard {
    let id = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
    temps().push((id, dir.to_path_buf()));
    TempGuard(id)
}

/// Whether `name` is a temporary file of this module (`.NAME.PID-N.tmp`).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp") && name.len() > 5
}

/// Remove every registered temporary path (on an interrupt).
fn remove_temps() {
    let t = temps();
    for (_, p) in t.iter() {
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
    }
    // The lock is kept: nothing new is registered before the exit.
    std::mem::forget(t);
}

/// On SIGINT, SIGTERM or SIGHUP: remove the temporary outputs and exit
/// with 128 + the signal. Call once, at the start of `main`, before any
/// thread is spawned (the signals are blocked in every thread and taken by
/// one thread of their own; child processes get the default mask back from
/// `std::process::Command`).
pub fn install_interrupt_cleanup() {
    #[cfg(unix)]
    // SAFETY: plain libc calls on a local, initialised sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("blis-signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                if libc::sigwait(&set, &mut sig) == 0 {
                    if graceful_signal(sig) {
                        continue;
                    }
                    remove_temps();
                    eprintln!("\ninterrupted (signal {sig}): temporary outputs removed");
                    std::process::exit(128 + sig);
                }
            });
        if spawned.is_err() {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

// ---- graceful stops ----

/// How many [`GracefulStop`]s are alive.
static GRACEFUL: AtomicUsize = AtomicUsize::new(0);
/// Signals taken while a [`GracefulStop`] was alive.
static GRACEFUL_SIGNALS: AtomicUsize = AtomicUsize::new(0);
static HURRY: AtomicBool = AtomicBool::new(false);

fn stop_flag() -> &'static Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// While alive, the first interrupt asks the command to stop and write
/// what it recorded instead of ending the process (see the module docs).
#[derive(Debug)]
pub struct GracefulStop(());

impl GracefulStop {
    /// Enter graceful mode until the guard is dropped.
    pub fn begin() -> GracefulStop {
        GRACEFUL.fetch_add(1, Ordering::SeqCst);
        GracefulStop(())
    }

    /// Set by the first interrupt: stop starting work.
    pub fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(stop_flag())
    }

    /// Whether the first interrupt came.
    pub fn stopping(&self) -> bool {
        stop_requested()
    }
}

impl Drop for GracefulStop {
    fn drop(&mut self) {
        GRACEFUL.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether an interrupt asked a [`GracefulStop`] holder to stop.
pub fn stop_requested() -> bool {
    stop_flag().load(Ordering::SeqCst)
}

/// Whether a second interrupt asked it to stop waiting.
pub fn hurry_requested() -> bool {
    HURRY.load(Ordering::SeqCst)
}

/// The signal thread's graceful step: whether `sig` was taken as a request
/// to stop (true) or the process ends now (false).
fn graceful_signal(sig: i32) -> bool {
    // Ctrl-C only: SIGTERM and SIGHUP still end the process at once.
    if sig != libc::SIGINT || GRACEFUL.load(Ordering::SeqCst) == 0 {
        return false;
    }
    match GRACEFUL_SIGNALS.fetch_add(1, Ordering::SeqCst) {
        0 => {
            stop_flag().store(true, Ordering::SeqCst);
            eprintln!(
                "\ninterrupted (signal {sig}): stopping — finishing the work in flight and writing what was recorded (interrupt again to stop waiting)"
            );
            true
        }
        1 => {
            HURRY.store(true, Ordering::SeqCst);
            eprintln!(
                "\ninterrupted again: writing what was recorded now (a third interrupt quits without writing)"
            );
            true
        }
        _ => false,
    }
}

/// Create a new temporary file next to `dest` (mode 0666 & !umask) and
/// register it, under the registry's lock, so an interrupt never misses it.
fn create_temp(dest: &Path) -> io::Result<(File, PathBuf, TempGuard)> {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut t = temps();
    loop {
        let id = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{}-{id}.tmp", std::process::id()));
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o666);
        }
        match opts.open(&temp) {
            Ok(f) => {
                t.push((id, temp.clone()));
                return Ok((f, temp, TempGuard(id)));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// An output being written: its temporary file, renamed onto the
/// destination by [`PendingOutput::commit`]. Dropped without a commit, the
/// temporary file is removed.
#[derive(Debug)]
pub struct PendingOutput {
    temp: PathBuf,
    /// The path given (for messages).
    path: PathBuf,
    /// The file really replaced (after symlinks).
    dest: PathBuf,
    guard: Option<TempGuard>,
}

impl PendingOutput {
    /// Create the temporary file for `path` (in the folder of its final
    /// target, so the rename is atomic); returns the file to write and the
    /// pending output. Refuses a destination that is not a regular file.
    pub fn create(path: &Path) -> io::Result<(File, PendingOutput)> {
        if path.as_os_str().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "empty output path",
            ));
        }
        let dest = destination(path)?;
        if let Some(kind) = special_kind(&dest) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is {kind}, not a regular file; blis writes its outputs as whole regular files",
                    path.display()
                ),
            ));
        }
        let (file, temp, guard) = create_temp(&dest)?;
        // A file that is replaced keeps its mode.
        if let Ok(m) = std::fs::metadata(&dest) {
            let _ = file.set_permissions(m.permissions());
        }
        Ok((
            file,
            PendingOutput {
                temp,
                path: path.to_path_buf(),
                dest,
                guard: Some(guard),
            },
        ))
    }

    /// Where the output goes (as given).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rename the (flushed) temporary file onto the destination.
    pub fn commit(mut self) -> io::Result<()> {
        let r = std::fs::rename(&self.temp, &self.dest).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot move the output into {}: {e}", self.path.display()),
            )
        });
        if r.is_ok() {
            self.guard = None;
        }
        r
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if self.guard.take().is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Write `bytes` to `path` atomically (see [`PendingOutput`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let (mut f, pending) = PendingOutput::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.flush())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    drop(f);
    pending.commit().map_err(|e| e.to_string())
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
        assert!(temps().is_empty() || temps().iter().all(|(_, t)| !t.starts_with(&d)));
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
        let e = check_paths(&[("output.trace_path", PathBuf::new())], &inputs);
        assert!(e[0].contains("output.trace_path is empty"), "{e:?}");
    }

    #[cfg(unix)]
    #[test]
    fn links_are_the_files_they_name() {
        let d = scratch("links");
        let run = d.join("run.toml");
        std::fs::write(&run, "x").unwrap();
        std::os::unix::fs::symlink("run.toml", d.join("sym")).unwrap();
        std::fs::hard_link(&run, d.join("hard")).unwrap();
        assert!(same_file(&d.join("sym"), &run));
        assert!(same_file(&d.join("hard"), &run));
        assert!(!same_file(&d.join("other"), &run));
        // A dangling link names its target.
        std::os::unix::fs::symlink("later.jsonl", d.join("dangling")).unwrap();
        assert!(same_file(&d.join("dangling"), &d.join("later.jsonl")));
        // Writing through a link replaces the target; the link stays.
        write_atomic(&d.join("dangling"), b"v1").unwrap();
        assert_eq!(std::fs::read(d.join("later.jsonl")).unwrap(), b"v1");
        assert!(std::fs::symlink_metadata(d.join("dangling"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
