//! Reading an input file whole, bounded: a run file, an llm-d config, a
//! model or hardware config, a calibration profile, a sweep, plan or tune
//! file, a TraceV2 header. No blis input of this kind comes near
//! [`MAX_INPUT_BYTES`]; a path that is a device (`/dev/zero`), a FIFO
//! that never ends or the wrong file is refused with an error instead of
//! reading gigabytes until the allocator aborts. Row-by-row readers (the
//! TraceV2 data) bound each line instead ([`MAX_LINE_BYTES`]).

use std::io::{self, Read};
use std::path::Path;

/// Largest input read whole, bytes (256 MiB).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Longest line of a file read row by row, bytes (1 MiB).
pub const MAX_LINE_BYTES: u64 = 1 << 20;

/// The error of an input past [`MAX_INPUT_BYTES`].
fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "it is larger than {} MiB, more than any file of this kind (is it the right file? a device or a pipe that never ends?)",
            MAX_INPUT_BYTES >> 20
        ),
    )
}

/// The bytes of `path`, at most [`MAX_INPUT_BYTES`].
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let hint = f.metadata().map_or(0, |m| m.len());
    if hint > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    let mut out = Vec::with_capacity(hint as usize);
    f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    Ok(out)
}

/// The text of `path` (UTF-8), at most [`MAX_INPUT_BYTES`].
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read(path.as_ref())?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is not UTF-8 text (byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// A reader that fails once a line (bytes since the last `\n`) passes
/// [`MAX_LINE_BYTES`]: for files a parser reads record by record (a CSV
/// whose parser would otherwise grow one record without end).
#[derive(Debug)]
pub struct LineBounded<R> {
    inner: R,
    run: u64,
}

impl<R: Read> LineBounded<R> {
    pub fn new(inner: R) -> Self {
        LineBounded { inner, run: 0 }
    }
}

impl<R: Read> Read for LineBounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            self.run = if b == b'\n' { 0 } else { self.run + 1 };
        }
        if self.run > MAX_LINE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a line is longer than {} MiB (is it the right file? a device or a pipe that never ends?)",
                    MAX_LINE_BYTES >> 20
                ),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_huge_files_are_refused_small_ones_read() {
        let e = read_to_string("/dev/zero").unwrap_err();
        assert!(e.to_string().contains("larger than 256 MiB"), "{e}");
        let p = std::env::temp_dir().join(format!("blis-input-{}", std::process::id()));
        std::fs::write(&p, "seed = 1\n").unwrap();
        assert_eq!(read_to_string(&p).unwrap(), "seed = 1\n");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_to_string(&p)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_line_past_the_limit_fails_the_read() {
        let ok = "a,b\n".repeat(1 << 19);
        let mut sink = Vec::new();
        LineBounded::new(ok.as_bytes())
            .read_to_end(&mut sink)
            .unwrap();
        let f = std::fs::File::open("/dev/zero").unwrap();
        let e = LineBounded::new(f).read_to_end(&mut sink).unwrap_err();
        assert!(e.to_string().contains("longer than 1 MiB"), "{e}");
    }
}
